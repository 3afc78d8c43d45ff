"""The block index: (namespace, key) -> location, compact enough for tens of millions of blocks.

A dict of bytes keys to tuples costs ~300 bytes per entry; this index keeps
- the key bytes, each followed by the block's attributes (opaque bytes, usually none), in one
  append-only arena (bytearray),
- the location fields in parallel typed arrays (``array.array``: C-typed, fast scalar access,
  viewable by numpy for vectorised scans),
- an open-addressing hash table of int32 entry numbers (linear probing, load <= 0.6),
for about 64 + 46 + 8 bytes per entry with 64-byte keys. Freed entry numbers are reused; the
arena is compacted when more than half of it is garbage.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

import numpy as np

EMPTY = -1
DELETED = -2
FLAG_HOT = 0x01
#: the largest namespace id (each entry keeps its namespace's id in 16 bits)
MAX_NAMESPACE_ID = 0xFFFF


class Location(NamedTuple):
    """Where a block is (immutable). A named tuple, not a frozen dataclass: the index makes
    one per lookup, and a frozen dataclass's ``__init__`` (a ``object.__setattr__`` per field)
    costs three times a tuple's."""

    segment: int  # store-internal segment id
    offset: int
    length: int  # stored (encoded) bytes
    raw_length: int  # bytes the client wrote
    crc: int
    codec: int
    written_at: float
    attrs: bytes = b""  # opaque attributes kept with the block (the S3 front's object metadata)


class BlockIndex:
    def __init__(self, capacity: int = 1024) -> None:
        self._arena = bytearray()
        self._garbage = 0
        self._key_off = array("Q")
        self._key_len = array("H")
        self._attr_len = array("H")
        self._ns = array("H")
        self._seg = array("I")
        self._off = array("I")
        self._len = array("I")
        self._raw = array("I")
        self._crc = array("I")
        self._codec = array("B")
        self._flags = array("B")
        self._wat = array("d")
        self._hash = array("I")  # 32-bit hash of (ns, key): probe filter and rehash source
        self._free: list[int] = []
        self._count = 0
        size = 16
        while size * 0.6 < capacity:
            size *= 2
        self._table = array("i", [EMPTY]) * size
        self._mask = size - 1
        self._used = 0  # live + deleted markers in the table

    def __len__(self) -> int:
        return self._count

    # ---- hashing ------------------------------------------------------------------------
    def _key(self, e: int) -> bytes:
        o = self._key_off[e]
        return bytes(self._arena[o:o + self._key_len[e]])

    @staticmethod
    def _hash_of(ns: int, key: bytes) -> int:
        return hash((ns, key)) & 0xFFFFFFFF

    def _find(self, ns: int, key: bytes, h: int) -> tuple[int, int]:
        """Returns (slot, entry) for a present key, or (insert slot, -1)."""
        table, mask, hashes = self._table, self._mask, self._hash
        i = h & mask
        first_free = -1
        while True:
            e = table[i]
            if e == EMPTY:
                return (first_free if first_free >= 0 else i), -1
            if e == DELETED:
                if first_free < 0:
                    first_free = i
            elif hashes[e] == h and self._ns[e] == ns and self._key(e) == key:
                return i, e
            i = (i + 1) & mask

    def _grow_table(self) -> None:
        size = len(self._table)
        if self._count * 2 > size * 0.6:
            size *= 2
        table = array("i", [EMPTY]) * size
        mask = size - 1
        hashes, seg = self._hash, self._seg
        for e in range(len(seg)):
            if seg[e] == 0xFFFFFFFF:
                continue  # a free entry
            i = hashes[e] & mask
            while table[i] != EMPTY:
                i = (i + 1) & mask
            table[i] = e
        self._table, self._mask, self._used = table, mask, self._count

    # ---- public API ---------------------------------------------------------------------
    def get(self, ns: int, key: bytes) -> Location | None:
        _, e = self._find(ns, key, self._hash_of(ns, key))
        return None if e < 0 else self._location(e)

    def _location(self, e: int) -> Location:
        alen = self._attr_len[e]
        attrs = b""
        if alen:
            o = self._key_off[e] + self._key_len[e]
            attrs = bytes(self._arena[o:o + alen])
        return Location(self._seg[e], self._off[e], self._len[e], self._raw[e], self._crc[e],
                        self._codec[e], self._wat[e], attrs)

    def put(self, ns: int, key: bytes, loc: Location) -> Location | None:
        """Insert or replace; returns the location it replaced."""
        h = self._hash_of(ns, key)
        slot, e = self._find(ns, key, h)
        if e >= 0:
            old = self._location(e)
            if len(loc.attrs) != self._attr_len[e] or loc.attrs != old.attrs:
                self._store_key(e, key, loc.attrs)
            self._set(e, loc)
            self._flags[e] = 0
            return old
        if (self._used + 1) > len(self._table) * 0.6:
            self._grow_table()
            slot, _ = self._find(ns, key, h)
        e = self._new_entry(ns, key, h, loc.attrs)
        self._set(e, loc)
        if self._table[slot] == EMPTY:
            self._used += 1
        self._table[slot] = e
        self._count += 1
        return None

    def _store_key(self, e: int, key: bytes, attrs: bytes) -> None:
        """Write key + attributes anew at the arena's end (the old copy becomes garbage)."""
        self._garbage += self._key_len[e] + self._attr_len[e]
        self._key_off[e] = len(self._arena)
        self._arena += key
        self._arena += attrs
        self._attr_len[e] = len(attrs)

    def _new_entry(self, ns: int, key: bytes, h: int, attrs: bytes = b"") -> int:
        off = len(self._arena)
        self._arena += key
        self._arena += attrs
        if self._free:
            e = self._free.pop()
            self._key_off[e], self._key_len[e], self._ns[e] = off, len(key), ns
            self._attr_len[e] = len(attrs)
            self._flags[e] = 0
            self._hash[e] = h
            return e
        self._hash.append(h)
        self._key_off.append(off)
        self._key_len.append(len(key))
        self._attr_len.append(len(attrs))
        self._ns.append(ns)
        for arr in (self._seg, self._off, self._len, self._raw, self._crc):
            arr.append(0)
        self._codec.append(0)
        self._flags.append(0)
        self._wat.append(0.0)
        return len(self._seg) - 1

    def _set(self, e: int, loc: Location) -> None:
        self._seg[e] = loc.segment
        self._off[e] = loc.offset
        self._len[e] = loc.length
        self._raw[e] = loc.raw_length
        self._crc[e] = loc.crc
        self._codec[e] = loc.codec
        self._wat[e] = loc.written_at

    def remove(self, ns: int, key: bytes) -> Location | None:
        slot, e = self._find(ns, key, self._hash_of(ns, key))
        if e < 0:
            return None
        old = self._location(e)
        self._table[slot] = DELETED
        self._release(e)
        return old

    def _release(self, e: int) -> None:
        self._garbage += self._key_len[e] + self._attr_len[e]
        self._key_len[e] = 0
        self._attr_len[e] = 0
        self._seg[e] = 0xFFFFFFFF
        self._free.append(e)
        self._count -= 1
        if self._garbage > 4096 and self._garbage * 2 > len(self._arena):
            self._compact_arena()

    def _compact_arena(self) -> None:
        arena = bytearray()
        for e in range(len(self._seg)):
            n = self._key_len[e] + self._attr_len[e]
            if n == 0 and self._seg[e] == 0xFFFFFFFF:
                self._key_off[e] = 0
                continue
            o = self._key_off[e]
            self._key_off[e] = len(arena)
            arena += self._arena[o:o + n]
        self._arena, self._garbage = arena, 0

    def touch(self, ns: int, key: bytes) -> None:
        """Mark a block as read since it was written (hot), for compaction."""
        _, e = self._find(ns, key, self._hash_of(ns, key))
        if e >= 0:
            self._flags[e] |= FLAG_HOT

    def _entries_where(self, mask: np.ndarray) -> list[int]:
        return [int(i) for i in np.flatnonzero(mask)]

    def segment_entries(self, segment: int) -> list[tuple[int, bytes, Location, bool]]:
        """Every live entry in a segment: (namespace, key, location, hot)."""
        seg = np.frombuffer(self._seg, dtype=np.uint32)
        out = [(self._ns[e], self._key(e), self._location(e), bool(self._flags[e] & FLAG_HOT))
               for e in self._entries_where(seg == segment)]
        del seg
        return out

    def drop_segment(self, segment: int) -> int:
        """Remove every entry located in ``segment``; returns how many."""
        entries = self.segment_entries(segment)
        for ns, key, _loc, _hot in entries:
            self.remove(ns, key)
        return len(entries)

    def live_entries(self, ns: int) -> np.ndarray:
        """Entry numbers of one namespace's live entries (a copy: it stays valid as a list of
        numbers after the index changes; what they hold then may not)."""
        return np.flatnonzero(self.in_namespace(slice(None), ns))

    def in_namespace(self, entries: np.ndarray | slice, ns: int) -> np.ndarray:
        """Which of ``entries`` (a slice: every entry) hold a block of namespace ``ns`` now."""
        nsarr = np.frombuffer(self._ns, dtype=np.uint16)
        seg = np.frombuffer(self._seg, dtype=np.uint32)
        out: np.ndarray = (nsarr[entries] == ns) & (seg[entries] != 0xFFFFFFFF)
        del nsarr, seg
        return out

    def fixed_keys(self, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The keys of ``entries`` as one fixed-width numpy ``S`` array, and their lengths.
        ``S`` order is the keys' order but for trailing NUL bytes, which it drops: order by
        (key, length) for the exact one. An entry freed since it was listed gives bytes of
        no meaning (:meth:`entry` tells)."""
        offs = np.frombuffer(self._key_off, dtype=np.uint64)[entries].astype(np.int64)
        lens = self.key_lengths(entries)
        width = max(1, int(lens.max(initial=0)))
        cols = np.arange(width)
        arena = np.frombuffer(self._arena, dtype=np.uint8) if self._arena else np.zeros(1, "u1")
        cells = arena[np.minimum(offs[:, None] + cols, len(arena) - 1)]
        del arena
        cells[cols >= lens[:, None]] = 0
        return cells.view(f"S{width}").ravel(), lens

    def key_lengths(self, entries: np.ndarray) -> np.ndarray:
        """The key lengths of ``entries`` (int64)."""
        lens: np.ndarray = np.frombuffer(self._key_len, dtype=np.uint16)[entries]
        return lens.astype(np.int64)

    def entry(self, e: int) -> tuple[int, bytes, Location] | None:
        """What entry ``e`` holds now, (namespace, key, location), or None if it is free."""
        if e >= len(self._seg) or self._seg[e] == 0xFFFFFFFF:
            return None
        return self._ns[e], self._key(e), self._location(e)

    def count_namespace(self, ns: int) -> int:
        return int(np.count_nonzero(self.in_namespace(slice(None), ns)))

    def memory_bytes(self) -> int:
        """Bytes held by the index's arrays (not counting Python object headers)."""
        arrays = (self._key_off, self._key_len, self._attr_len, self._ns, self._seg, self._off,
                  self._len, self._raw, self._crc, self._codec, self._flags, self._wat, self._hash,
                  self._table)
        return len(self._arena) + sum(a.itemsize * len(a) for a in arrays)
