"""The segment being written: its bytes as the pieces they arrived in, its manifest entries, its
upload queue.

A block's bytes are not copied on the write path: the open segment keeps the immutable pieces
a request body arrived in (views of them, cut at part boundaries), and every ``part_size``
bytes of them are queued for upload as one part, a sequence of buffers that the backend writes
out as it is (``pwritev`` into a file, one request body of slices to S3). A piece that could
change under us (a caller's ``bytearray``, a writable view) is copied once on the way in.
Padding comes from one shared zero buffer. Reads of a segment still in memory are served from
these pieces (views of them). The writer (writer.py) decides when a segment opens, seals and goes.

A block can also be received straight into the segment (:meth:`OpenSegment.land`): its range
is a writable window the backend lends onto the upload's own bytes (the file backend's
mapping of the segment's file), kept as a piece like any other, written by the request body
as it arrives; the segment seals only once every such block is in or given up
(:meth:`settled`). Reads of a landed block are views of its window too: its bytes never change
once the block is in, and the file backend recycles the segment's file only once no view of a
window onto it is left (filemaps.py's ``adopt``).

Before, every block was copied into reused part buffers: for a 32 MiB PUT that copy read
pieces gone cold by the time the whole body was in (~2 GB/s here), the largest cost in the
gateway after the file writes themselves.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Sequence
from typing import NamedTuple

from s3kv.backends.multipart import MultipartUpload
from s3kv.store import layout
from s3kv.store.segments import SegmentInfo
from s3kv.wire.body import Buffer, Pieces, immutable, pieces_of

#: zeros to pad with, shared (read-only, so kept by reference like any immutable piece)
_ZEROS = memoryview(bytes(1 << 20))

#: a part as queued for upload: its pieces, in order
Part = tuple[memoryview, ...]


class Room(NamedTuple):
    """A block's place in an open segment, to receive it into (:meth:`OpenSegment.land`):
    its ``window`` (the bytes at ``offset``) is part of ``run``, the window lent for it and
    the blocks around it, which starts at ``run_start``."""

    key: bytes
    segment: OpenSegment
    offset: int
    window: memoryview
    run: memoryview
    run_start: int


class OpenSegment:
    def __init__(self, info: SegmentInfo, part_size: int, upload: MultipartUpload) -> None:
        self.info = info
        self.part_size = part_size
        self.upload = upload
        self.parts: list[Part] = []  # queued or uploaded; kept for reads
        self._cur: list[memoryview] = []  # the pieces of the part being filled
        self.cur_len = 0
        #: for each part (the current one last), where each of its pieces ends in it
        self._ends: list[list[int]] = [[]]
        self.size = 0
        self.entries: list[layout.Entry] = []
        self.namespaces: set[str] = set()
        self.manifest_bytes = layout.manifest_overhead(info.name)
        self.first_at = 0.0
        #: resolved by the writer once the segment is on the backend (or failed); waiters use
        #: on_backend(): a waiter's cancellation must not cancel the segment's own future
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue: asyncio.Queue[Part | None] = asyncio.Queue()
        self.uploader: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.sealing = False
        #: blocks being received into a window of the segment (land), not yet in or given up
        self.landing = 0
        self._settle: asyncio.Future[None] | None = None

    def room_for(self, namespace: str, key: bytes, length: int, align: int,
                 segment_size: int, attrs: int = 0) -> bool:
        start = layout.align_up(self.size, align)
        ns_new = namespace if namespace not in self.namespaces else None
        manifest = self.manifest_bytes + layout.entry_bytes(ns_new, key, attrs)
        return start + length + manifest + layout.TRAILER_SIZE <= segment_size

    def write(self, data: Buffer) -> None:
        """Append ``data``, kept by reference if it cannot change (copied once if it can); a
        full part is queued for upload as it is."""
        self._keep(memoryview(data if immutable(data) else bytes(data)))

    def plan_run(self, namespace: str, blocks: Sequence[tuple[bytes, int]], align: int,
                 segment_size: int, attrs: int) -> list[int]:
        """Offsets of the leading ``blocks`` (key, length) that fit here one after another at
        aligned offsets, with their manifest entries' room held as :meth:`expect_landing`
        holds it (attributes of up to ``attrs`` bytes each)."""
        offsets: list[int] = []
        end, manifest = self.size, self.manifest_bytes
        for key, length in blocks:
            start = layout.align_up(end, align)
            manifest += layout.entry_bytes(namespace, key, attrs)
            if start + length + manifest + layout.TRAILER_SIZE > segment_size:
                break
            offsets.append(start)
            end = start + length
        return offsets

    def expect_landing(self, namespace: str, key: bytes, attrs: int) -> None:
        """A block is to be received into the segment (:meth:`land`): it seals only after
        :meth:`landed`, and the block's manifest entry keeps its room (with attributes of up
        to ``attrs`` bytes) until then."""
        self.landing += 1
        self.manifest_bytes += layout.entry_bytes(namespace, key, attrs)

    def land(self, window: memoryview, blocks: Sequence[tuple[bytes, int, int]]) -> list[Room]:
        """Append ``window`` (a writable window the upload lends onto its own bytes here, at
        an aligned end; :meth:`expect_landing` first for each block in it) by reference, for
        ``blocks`` (key, offset, length) to be received into: their rooms in it (the gaps
        between them are zeroed)."""
        start = at = self.size
        rooms = []
        for key, offset, length in blocks:
            window[at - start:offset - start] = bytes(offset - at)  # alignment gaps are zeros
            rooms.append(Room(key, self, offset,
                              window[offset - start:offset - start + length], window, start))
            at = offset + length
        self._keep(window)
        return rooms

    def landed(self, namespace: str, key: bytes, attrs: int) -> None:
        """The block expected (:meth:`expect_landing`, with the same ``attrs``) is in, its
        entry added, or given up."""
        self.landing -= 1
        self.manifest_bytes -= layout.entry_bytes(namespace, key, attrs)
        settle, self._settle = self._settle, None
        if settle is not None and not settle.done():
            settle.set_result(None)

    async def on_backend(self) -> None:
        """Wait until the segment is on the backend (raises as its upload failed). Awaiting
        ``done`` itself would cancel it with the waiter: a durable put whose client went away,
        an eviction round stopped at shutdown, then failed the segment for every other waiter
        and for the writer's flush, which counted its blocks lost though they were uploaded."""
        await asyncio.shield(self.done)

    async def settled(self) -> None:
        """Wait until no block is being received into the segment (before it seals)."""
        while self.landing:
            if self._settle is None:
                self._settle = asyncio.get_running_loop().create_future()
            await self._settle

    def _keep(self, view: memoryview) -> None:
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self.size += len(view)
        while view:
            take = min(self.part_size - self.cur_len, len(view))
            self._cur.append(view[:take])
            self.cur_len += take
            self._ends[-1].append(self.cur_len)
            view = view[take:]
            if self.cur_len == self.part_size:
                self._queue_part()

    def _queue_part(self) -> None:
        part = tuple(self._cur)
        self.parts.append(part)
        self.queue.put_nowait(part)
        self._cur = []
        self.cur_len = 0
        self._ends.append([])

    def pad(self, n: int) -> None:
        """Write ``n`` zero bytes."""
        while n > 0:
            take = min(n, len(_ZEROS))
            self.write(_ZEROS[:take])
            n -= take

    def finish_last_part(self) -> None:
        """Queue the partly filled last part."""
        if self.cur_len:
            self._queue_part()

    def close(self, full_size: int | None) -> bytes:
        """Seal: append the manifest and the trailer (so that the segment ends at exactly
        ``full_size``, when given), queue the last part and the end of the parts. Returns the
        manifest (the sidecar's bytes)."""
        manifest = layout.Manifest(self.info.name, time.time(), 0, self.entries)
        body = manifest.encode()
        offset = self.size if full_size is None else full_size - layout.TRAILER_SIZE - len(body)
        manifest.segment_length = offset + len(body) + layout.TRAILER_SIZE
        body = manifest.encode()  # same length, now with the segment length filled in
        self.pad(offset - self.size)
        self.write(body)
        self.write(layout.encode_trailer(offset, body))
        self.finish_last_part()
        self.queue.put_nowait(None)
        return body

    def append(self, data: Pieces, align: int) -> int:
        self.pad(layout.align_up(self.size, align) - self.size)
        offset = self.size
        for piece in pieces_of(data):
            self.write(piece)
        return offset

    def add_entry(self, entry: layout.Entry) -> None:
        ns_new = entry.namespace if entry.namespace not in self.namespaces else None
        self.manifest_bytes += layout.entry_bytes(ns_new, entry.key, len(entry.attrs))
        self.namespaces.add(entry.namespace)
        self.entries.append(entry)

    def read(self, offset: int, length: int) -> list[memoryview]:
        """Bytes [offset, offset+length) as views of the pieces that hold them (no copy: the
        pieces never change, and the views keep them alive after the segment is gone)."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ValueError("read past the end of the open segment")
        out: list[memoryview] = []
        idx, inner = divmod(offset, self.part_size)
        left = length
        while left > 0:
            part = self.parts[idx] if idx < len(self.parts) else self._cur
            ends = self._ends[idx]
            j = bisect.bisect_right(ends, inner)  # the piece holding byte ``inner``
            inner -= ends[j - 1] if j else 0
            while left > 0 and j < len(part):
                take = min(len(part[j]) - inner, left)
                piece = part[j][inner:inner + take]
                out.append(piece)
                left -= take
                inner = 0
                j += 1
            idx += 1
        return out or [memoryview(b"")]

    def release(self) -> None:
        """Let go of the pieces (the segment is on the backend, or failed)."""
        self.parts.clear()
        self._cur = []
        self._ends = [[]]
