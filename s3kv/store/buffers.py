"""Part buffers of the segment writer, kept for reuse.

A fresh ``part_size`` bytearray is zeroed memory the kernel maps in page by page as the
writer fills it (a fault per 4 KiB: ~20 ms per 64 MiB here), every time a segment opens.
Buffers of sealed segments come back here instead. Reuse never raises the writer's memory
bound: a buffer is only allocated when none is free, so the buffers alive never outnumber the
most the writer held at once (``max_open_segments`` segments of parts), and at most ``keep``
idle ones stay after a burst.
"""

from __future__ import annotations


class PartPool:
    def __init__(self, part_size: int, keep: int) -> None:
        self.part_size = part_size
        self.keep = keep
        self._free: list[bytearray] = []

    def take(self) -> bytearray:
        """A part_size buffer (contents undefined: the writer overwrites what it uses)."""
        return self._free.pop() if self._free else bytearray(self.part_size)

    def give(self, buffers: list[bytearray]) -> None:
        """Buffers no longer read nor uploaded (whole: the writer never resizes one)."""
        self._free.extend(buffers[:max(0, self.keep - len(self._free))])

    @property
    def idle_bytes(self) -> int:
        return len(self._free) * self.part_size
