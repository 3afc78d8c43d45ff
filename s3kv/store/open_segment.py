"""The segment being written: its bytes in part buffers, its manifest entries, its upload queue.

Blocks are copied into the current part buffer at ``block_align`` boundaries (the only copy
of a block's bytes on the write path); every full part is queued for upload as it is and
never written again; the last, short part is a view of its buffer. Reads of a segment still
in memory are served from these buffers (copied out). The writer (writer.py) decides when a
segment opens, seals and goes.
"""

from __future__ import annotations

import asyncio

from s3kv.backends.multipart import MultipartUpload
from s3kv.store import layout
from s3kv.store.buffers import PartPool
from s3kv.store.segments import SegmentInfo
from s3kv.wire.body import Buffer, Pieces, pieces_of

#: zeros to pad with, shared (a fresh ``bytes(n)`` per pad was a zeroed allocation of up to a
#: block's size, faulted in page by page, each time a full segment was sealed)
_ZEROS = memoryview(bytes(1 << 20))


class OpenSegment:
    def __init__(self, info: SegmentInfo, pool: PartPool, upload: MultipartUpload) -> None:
        self.info = info
        self.pool = pool
        self.part_size = pool.part_size
        self.upload = upload
        self.parts: list[bytearray | memoryview] = []  # queued or uploaded; kept for reads
        self.cur = pool.take()  # the part being filled
        self._cur_view = memoryview(self.cur)
        self.cur_len = 0
        # every buffer taken from the pool, given back whole when the segment is released: a
        # buffer is never resized (a view of it may outlive its upload, in an HTTP library's
        # request objects, until they are collected; resizing would then fail)
        self.buffers = [self.cur]
        self.size = 0
        self.entries: list[layout.Entry] = []
        self.namespaces: set[str] = set()
        self.manifest_bytes = layout.manifest_overhead(info.name)
        self.first_at = 0.0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue: asyncio.Queue[bytearray | memoryview | None] = asyncio.Queue()
        self.uploader: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.sealing = False

    def room_for(self, namespace: str, key: bytes, length: int, align: int,
                 segment_size: int, attrs: int = 0) -> bool:
        start = layout.align_up(self.size, align)
        ns_new = namespace if namespace not in self.namespaces else None
        manifest = self.manifest_bytes + layout.entry_bytes(ns_new, key, attrs)
        return start + length + manifest + layout.TRAILER_SIZE <= segment_size

    def write(self, data: Buffer) -> None:
        """Copy into the current part (the only copy of a block's bytes on the write path);
        a full part is queued for upload as it is and never written again."""
        view = memoryview(data)
        while view:
            take = min(self.part_size - self.cur_len, len(view))
            # through a memoryview: one copy (a bytearray's slice assignment first copies a
            # value that is not a bytearray into a temporary one: a fresh allocation per piece)
            self._cur_view[self.cur_len:self.cur_len + take] = view[:take]
            self.cur_len += take
            view = view[take:]
            if self.cur_len == self.part_size:
                self.parts.append(self.cur)
                self.queue.put_nowait(self.cur)
                self.cur = self.pool.take()
                self._cur_view = memoryview(self.cur)
                self.buffers.append(self.cur)
                self.cur_len = 0
        self.size += len(data)

    def pad(self, n: int) -> None:
        """Write ``n`` zero bytes."""
        while n > 0:
            take = min(n, len(_ZEROS))
            self.write(_ZEROS[:take])
            n -= take

    def finish_last_part(self) -> None:
        """Queue the partly filled last part (sealing)."""
        if self.cur_len:
            last = memoryview(self.cur)[:self.cur_len]
            self.parts.append(last)
            self.queue.put_nowait(last)
            self.cur = bytearray()
            self._cur_view = memoryview(self.cur)
            self.cur_len = 0

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

    def read(self, offset: int, length: int) -> memoryview:
        """A copy of bytes [offset, offset+length) (a buffer of its own: the part buffers are
        reused once the segment is sealed)."""
        out = memoryview(bytearray(length))
        end = offset + length
        pos = offset
        while pos < end:
            idx, inner = divmod(pos, self.part_size)
            if idx < len(self.parts):
                src, filled = self.parts[idx], len(self.parts[idx])
            else:
                src, filled = self.cur, self.cur_len
            take = min(end - pos, filled - inner)
            if take <= 0:
                raise ValueError("read past the end of the open segment")
            out[pos - offset:pos - offset + take] = memoryview(src)[inner:inner + take]
            pos += take
        return out
