"""The DRAM tier: a byte-bounded LRU of hot, decoded blocks in front of the backend.

Each entry remembers the index location it was taken for, and is used only while the index
still points there: a block overwritten, moved by compaction or replaced by another replica's
write (replica sync) is never served stale, whoever changed the index.

Blocks enter the tier as they are written (``--dram-fill write``, the default: a prefix that
comes back soon is served from memory) and as they are read from the backend. A block written
in pieces (a request body as it arrived) is kept in those pieces, not joined: its bytes are not
copied. A piece that is a view into a larger received buffer (a batch put's socket read holds
many blocks) keeps that whole buffer alive, so the tier counts what it keeps alive: each such
buffer once, however many of its entries' pieces are views of it, until the last of them
leaves. Pieces that could change (a reused buffer, a memory map of a file) are copied.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from s3kv.store.index import Location
from s3kv.wire.body import Buffer, Pieces, immutable, pieces_of


@dataclass(frozen=True)
class _Entry:
    loc: Location
    data: Pieces


def _buffer_of(piece: Buffer) -> Buffer:
    """What ``piece`` keeps alive: the whole buffer a view is of, else the piece itself."""
    if isinstance(piece, memoryview) and isinstance(piece.obj, (bytes, bytearray)):
        return piece.obj
    return piece


def _buffers_of(data: Pieces) -> list[Buffer]:
    """What ``data``'s pieces keep alive, one buffer per piece (see :func:`_buffer_of`)."""
    return [_buffer_of(p) for p in pieces_of(data)]


def frozen_copy(data: Pieces) -> Pieces:
    """``data`` as the tier may keep it: immutable pieces as they are (views included: the
    tier counts the buffers they keep alive), anything else copied into one buffer."""
    parts = pieces_of(data)
    if len(parts) == 1 and isinstance(parts[0], bytes):
        return parts[0]
    if not all(immutable(p) for p in parts):
        return b"".join(parts)
    return tuple(parts)


class DramCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.size = 0  # bytes of the buffers the entries keep alive, each counted once
        self._items: OrderedDict[tuple[int, bytes], _Entry] = OrderedDict()
        #: id of a buffer the entries keep alive -> [their pieces in it, its size]; an id is
        #: unique while its buffer lives, and the pieces counted keep it alive
        self._buffers: dict[int, list[int]] = {}

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, ns: int, key: bytes, loc: Location) -> Pieces | None:
        """The block held for ``loc``; an entry taken for another location is dropped."""
        entry = self._items.get((ns, key))
        if entry is None:
            return None
        if entry.loc != loc:
            self.invalidate(ns, key)
            return None
        self._items.move_to_end((ns, key))
        return entry.data

    def put(self, ns: int, key: bytes, loc: Location, data: Pieces) -> None:
        """Keep ``data`` (the block's decoded bytes at ``loc``), evicting the coldest. The
        caller must not change it afterwards: see :func:`frozen_copy`."""
        if not self.enabled:
            return
        self.invalidate(ns, key)
        held = _buffers_of(data)
        new = {id(b): len(b) for b in held if id(b) not in self._buffers}
        if sum(new.values()) > self.capacity // 4:
            return  # a block that would flush a quarter of the tier is not worth caching
        self._items[(ns, key)] = _Entry(loc, data)
        self._hold(held)
        while self.size > self.capacity and self._items:
            _, old = self._items.popitem(last=False)
            self._release(_buffers_of(old.data))

    def _hold(self, held: list[Buffer]) -> None:
        buffers = self._buffers
        for buf in held:
            counted = buffers.get(id(buf))
            if counted is None:
                buffers[id(buf)] = [1, len(buf)]
                self.size += len(buf)
            else:
                counted[0] += 1

    def _release(self, held: list[Buffer]) -> None:
        buffers = self._buffers
        for buf in held:
            counted = buffers[id(buf)]
            counted[0] -= 1
            if counted[0] == 0:
                del buffers[id(buf)]
                self.size -= counted[1]

    def invalidate(self, ns: int, key: bytes) -> None:
        old = self._items.pop((ns, key), None)
        if old is not None:
            self._release(_buffers_of(old.data))

    def invalidate_namespace(self, ns: int) -> None:
        for k in [k for k in self._items if k[0] == ns]:
            self._release(_buffers_of(self._items.pop(k).data))
