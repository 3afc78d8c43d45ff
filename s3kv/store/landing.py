"""Blocks received straight into their place in the open segment (large bodies, file backend).

When a large body begins, the gateway asks the store for a landing (``BlockStore.land``): the
writer takes room for its blocks in the open segment (one S3 PUT's block, or a native batch
put's blocks one after another), and the backend lends a writable window onto that room (the
file backend: a mapping of the segment's file), which the connection receives the body into
(gateway/takeover.py). The kernel's copy from the socket is then the only copy of those bytes:
before, they were received into buffers and written again into the file (``pwritev``), ~0.25
CPU-s per GiB here. Once the body is in and verified the blocks are committed
(``BlockStore.landed``: their manifest entries, then the index); a body that fails gives its
room up (:meth:`Landing.abandon`): dead bytes in the segment that no entry points to.
The blocks' checksums can be worked out as their bytes arrive (:meth:`Landing.lengths` for
store/blocksums.py).

Only blocks stored as they are (no codec) land, and only bodies of at least ``LAND_MIN`` bytes
whose blocks are each empty or at least ``LAND_BLOCK_MIN`` (the socket reads go block by block
where blocks are not contiguous); the rest are appended as before. A segment seals once every block
landing in it is in or given up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from s3kv.errors import TooLarge
from s3kv.sizes import KiB, MiB
from s3kv.store import layout
from s3kv.store import rooms as rooms_
from s3kv.store.codecs import NONE_ID, CodecSpec
from s3kv.store.ingest import check_key
from s3kv.store.open_segment import Room
from s3kv.store.writer import SegmentWriter

#: smaller bodies are appended (they mostly arrive with the request's head anyway)
LAND_MIN = 1 * MiB
#: a batch with a smaller block is appended
LAND_BLOCK_MIN = 64 * KiB


class Landing:
    """Room for blocks in the open segment(s), each ended once, by :meth:`commit` or
    :meth:`abandon` (what is ended already is left alone). ``attrs``: the most attribute
    bytes a block's entry may carry (its manifest room is held for that many)."""

    def __init__(self, writer: SegmentWriter, namespace: str, rooms: list[Room],
                 attrs: int) -> None:
        self.writer = writer
        self.namespace = namespace
        self.rooms = rooms
        self.attrs = attrs
        self._left = deque(rooms)  # not ended yet, in order

    def spans(self) -> list[memoryview]:
        """The windows to receive the blocks' bytes into, in order (adjacent ones as one)."""
        spans: list[tuple[memoryview, int, int]] = []
        for room in self.rooms:
            start = room.offset - room.run_start
            end = start + len(room.window)
            if spans and spans[-1][0] is room.run and spans[-1][2] == start:
                spans[-1] = (room.run, spans[-1][1], end)
            elif end > start:
                spans.append((room.run, start, end))
        return [run[start:end] for run, start, end in spans]

    def lengths(self) -> list[int]:
        """The blocks' lengths, in order: what the bytes received into :meth:`spans` add up
        to, block by block (``blocksums.SumWorker.start``)."""
        return [len(room.window) for room in self.rooms]

    def commit(self, crcs: Sequence[int], attrs: bytes,
               placed: Callable[[Room, layout.Entry], None]) -> None:
        """The windows hold the blocks, verified (``crcs``: their ``layout.checksum``): their
        entries are placed, ``placed(room, entry)`` called as each is (the store indexes it).
        Raises BackendUnavailable if a segment failed meanwhile: the blocks before it are
        placed, the rest given up."""
        if len(crcs) != len(self.rooms) or len(self._left) != len(self.rooms):
            raise RuntimeError("a landing is committed once, whole")
        for room, crc in zip(self.rooms, crcs, strict=True):
            self._left.popleft()
            n = len(room.window)
            try:
                entry = rooms_.commit(self.writer, room.segment, layout.Entry(
                    self.namespace, room.key, room.offset, n, n, crc, NONE_ID, 0.0,
                    attrs=attrs), self.attrs)
            except BaseException:
                self.abandon()
                raise
            placed(room, entry)

    def abandon(self) -> None:
        """Give up the blocks not committed."""
        left, self._left = self._left, deque()
        for room in left:
            rooms_.give_up(room.segment, self.namespace, room.key, self.attrs)


def lands(blocks: Sequence[tuple[bytes, int]], spec: CodecSpec, max_block_size: int,
          least: int = LAND_MIN) -> bool:
    """Whether ``blocks`` (key, length) are to land; False: append them instead (bodies under
    ``least`` bytes, small blocks, a codec's output). Raises InvalidInput (a key), TooLarge
    (as an append would)."""
    lengths = [n for _, n in blocks if n]  # an empty block has no bytes to receive
    if spec.name != "none" or sum(lengths) < least \
            or (len(lengths) > 1 and min(lengths) < LAND_BLOCK_MIN):
        return False
    for key, length in blocks:
        check_key(key)
        if length > max_block_size:
            raise TooLarge(f"block of {length} bytes is over max_block_size ({max_block_size})")
    return True


async def reserve(writer: SegmentWriter, namespace: str, blocks: Sequence[tuple[bytes, int]],
                  spec: CodecSpec, max_block_size: int, attrs: int,
                  least: int = LAND_MIN) -> Landing | None:
    """A landing for ``blocks`` (key, length); None: append them instead (as :func:`lands`
    says, or a backend that lends no window). Raises InvalidInput (a key), TooLarge,
    Backpressure (as an append would)."""
    if not lands(blocks, spec, max_block_size, least):
        return None
    rooms = await rooms_.take(writer, namespace, blocks, attrs)
    return None if rooms is None else Landing(writer, namespace, rooms, attrs)


def reserve_now(writer: SegmentWriter, namespace: str, blocks: Sequence[tuple[bytes, int]],
                spec: CodecSpec, max_block_size: int, attrs: int,
                least: int = LAND_MIN) -> Landing | None:
    """:func:`reserve`'s landing when taking its room needs no wait (rooms.py's ``take_now``);
    None: ask that."""
    if not lands(blocks, spec, max_block_size, least):
        return None
    rooms = rooms_.take_now(writer, namespace, blocks, attrs)
    return None if rooms is None else Landing(writer, namespace, rooms, attrs)
