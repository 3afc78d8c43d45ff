"""Block checksums worked out as a landing's bytes arrive (store/landing.py, gateway/takeover.py).

A native batch put's blocks are received straight into their segment, and their CRCs are
worked out on the event loop as each socket read lands (:class:`BlockSums`, a running CRC per
block), right after the read: a landing's reads are of 256 KiB at most, so the bytes are still
in the CPU's cache (takeover.py's ``READ_MOST``). History (docs/performance.md, issue 17): the
CRCs were first computed once the whole body was in (one worker-thread hop over 16 MiB the
request waited ~5 ms for); then on the loop after reads of several MiB, which the CPU's cache
no longer held (the loop ~25 % busier per block, session 34); then on one worker thread fed
each read (sessions 34-35), which read every byte back from memory: ~4x the CRC's CPU of a
piece read while cached (session 38).
"""

from __future__ import annotations

from collections.abc import Sequence

from s3kv.store import layout


class BlockSums:
    """The checksums (``layout.checksum``) of blocks of ``lengths``, fed their bytes in order,
    in pieces of any size (:meth:`feed`, from a protocol's callback: bytes that do not add up
    are :meth:`values`' error, not the callback's)."""

    def __init__(self, lengths: Sequence[int]) -> None:
        self._lengths = lengths
        self._error: ValueError | None = None
        self._crcs = [0] * len(lengths)
        self._block = -1  # the block being fed
        self._left = 0  # its bytes still to come
        self._next()

    def _next(self) -> None:
        """On to the next block that has bytes (an empty block's checksum is 0)."""
        self._block += 1
        while self._block < len(self._lengths) and not self._lengths[self._block]:
            self._block += 1
        self._left = self._lengths[self._block] if self._block < len(self._lengths) else 0

    def feed(self, data: memoryview) -> None:
        """The next bytes of the blocks, from where the last piece ended."""
        while data and self._error is None:
            if not self._left:
                self._error = ValueError("more bytes than the blocks' lengths add up to")
                return
            n = min(self._left, len(data))
            i = self._block
            self._crcs[i] = layout.checksum_more(self._crcs[i], data[:n] if n < len(data)
                                                 else data)
            data = data[n:]
            self._left -= n
            if not self._left:
                self._next()

    def values(self) -> list[int]:
        """Each block's checksum; raises ValueError if bytes are still to come, or came
        past the blocks' end."""
        if self._error is not None:
            raise self._error
        if self._left:
            raise ValueError(f"{self._left} bytes of block {self._block} are still to come")
        return list(self._crcs)
