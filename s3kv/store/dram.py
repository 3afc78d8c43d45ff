"""The DRAM tier: a byte-bounded LRU of hot, decoded blocks in front of the backend.

Each entry remembers the index location it was taken for, and is used only while the index
still points there: a block overwritten, moved by compaction or replaced by another replica's
write (replica sync) is never served stale, whoever changed the index.

Blocks enter the tier as they are written (``--dram-fill write``, the default: a prefix that
comes back soon is served from memory) and as they are read from the backend. A block written
in pieces (a request body as it arrived) is kept in those pieces, not joined: its bytes are not
copied. A piece that is a view into a larger received buffer keeps that buffer alive, so an
entry is charged for the buffers it holds, not only for its own bytes, and a small block held
in views is copied instead (it would pin far more than itself).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from s3kv.store.index import Location
from s3kv.wire.body import Buffer, Pieces, immutable, pieces_of, size_of

#: a block smaller than this is copied into a buffer of its own when it enters the tier in
#: pieces or as a view (cheap at this size, and it pins nothing else)
COPY_BELOW = 1024 * 1024


@dataclass(frozen=True)
class _Entry:
    loc: Location
    data: Pieces
    charge: int  # bytes of memory the entry keeps alive


def _held(piece: Buffer) -> int:
    """Bytes of memory ``piece`` keeps alive (a view keeps its whole underlying buffer)."""
    if isinstance(piece, memoryview) and isinstance(piece.obj, (bytes, bytearray)):
        return len(piece.obj)
    return len(piece)


def frozen_copy(data: Pieces) -> Pieces:
    """``data`` as the tier may keep it: immutable pieces, small blocks in one buffer."""
    parts = pieces_of(data)
    if len(parts) == 1 and isinstance(parts[0], bytes):
        return parts[0]
    if size_of(parts) < COPY_BELOW or not all(immutable(p) for p in parts):
        return b"".join(parts)
    return tuple(parts)


class DramCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.size = 0  # bytes charged: what the entries keep alive
        self._items: OrderedDict[tuple[int, bytes], _Entry] = OrderedDict()

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
        charge = sum(_held(p) for p in pieces_of(data))
        self.invalidate(ns, key)
        if charge > self.capacity // 4:
            return  # a block that would flush a quarter of the tier is not worth caching
        self._items[(ns, key)] = _Entry(loc, data, charge)
        self.size += charge
        while self.size > self.capacity:
            _, old = self._items.popitem(last=False)
            self.size -= old.charge

    def invalidate(self, ns: int, key: bytes) -> None:
        old = self._items.pop((ns, key), None)
        if old is not None:
            self.size -= old.charge

    def invalidate_namespace(self, ns: int) -> None:
        for k in [k for k in self._items if k[0] == ns]:
            self.size -= self._items.pop(k).charge
