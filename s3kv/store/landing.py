"""A block received straight into its place in the open segment (large PUTs, file backend).

When a large body begins, the gateway asks the store for a landing (``BlockStore.land``): the
writer takes room for the block in the open segment, and the backend lends a writable window
onto that room (the file backend: a mapping of the segment's file), which the connection
receives the body into (gateway/takeover.py). The kernel's copy from the socket is then the
only copy of those bytes: before, they were received into buffers and written again into the
file (``pwritev``), ~0.25 CPU-s per GiB here. Once the body is in and verified the block is
committed (``BlockStore.landed``: its manifest entry, then the index); a body that fails gives
its room up (:meth:`Landing.abandon`): dead bytes in the segment that no entry points to.

Only blocks stored as they are (no codec) of at least ``LAND_MIN`` bytes land; the rest are
appended as before. The segment seals once every block landing in it is in or given up.
"""

from __future__ import annotations

from s3kv.errors import TooLarge
from s3kv.sizes import MiB
from s3kv.store import layout
from s3kv.store.codecs import NONE_ID, CodecSpec
from s3kv.store.ingest import check_key
from s3kv.store.open_segment import OpenSegment
from s3kv.store.writer import SegmentWriter

#: smaller blocks are appended (their bodies mostly arrive with the request's head anyway)
LAND_MIN = 1 * MiB


class Landing:
    """Room for one block in ``segment`` at ``offset``, and the ``window`` to receive it into;
    ended once, by :meth:`commit` or :meth:`abandon` (a second end is ignored)."""

    def __init__(self, writer: SegmentWriter, namespace: str, key: bytes, segment: OpenSegment,
                 offset: int, window: memoryview) -> None:
        self.writer = writer
        self.namespace = namespace
        self.key = key
        self.segment = segment
        self.offset = offset
        self.window = window
        self.ended = False

    def commit(self, crc: int, attrs: bytes) -> layout.Entry:
        """The window holds the block, verified (``crc``: its ``layout.checksum``): its entry,
        placed. Raises BackendUnavailable if the segment failed meanwhile."""
        if self.ended:
            raise RuntimeError("a landing is committed or abandoned once")
        self.ended = True
        n = len(self.window)
        return self.writer.commit(self.segment, layout.Entry(
            self.namespace, self.key, self.offset, n, n, crc, NONE_ID, 0.0, attrs=attrs))

    def abandon(self) -> None:
        if not self.ended:
            self.ended = True
            self.writer.abandon(self.segment, self.namespace, self.key)


async def reserve(writer: SegmentWriter, namespace: str, key: bytes, length: int,
                  spec: CodecSpec, max_block_size: int) -> Landing | None:
    """A landing for a block of ``length`` bytes; None: append it instead (a small block, a
    codec's output, a backend that lends no window). Raises InvalidInput (the key), TooLarge,
    Backpressure (as an append would)."""
    if spec.name != "none" or length < LAND_MIN:
        return None
    check_key(key)
    if length > max_block_size:
        raise TooLarge(f"block of {length} bytes is over max_block_size ({max_block_size})")
    room = await writer.reserve(namespace, key, length)
    return None if room is None else Landing(writer, namespace, key, *room)
