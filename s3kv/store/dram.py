"""The DRAM tier: a byte-bounded LRU of hot, decoded blocks in front of the backend."""

from __future__ import annotations

from collections import OrderedDict


class DramCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.size = 0
        self._items: OrderedDict[tuple[int, bytes], bytes] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, ns: int, key: bytes) -> bytes | None:
        item = self._items.get((ns, key))
        if item is not None:
            self._items.move_to_end((ns, key))
        return item

    def put(self, ns: int, key: bytes, data: bytes) -> None:
        if not self.enabled or len(data) > self.capacity // 4:
            return  # a block that would flush a quarter of the tier is not worth caching
        self.invalidate(ns, key)
        self._items[(ns, key)] = data
        self.size += len(data)
        while self.size > self.capacity:
            _, old = self._items.popitem(last=False)
            self.size -= len(old)

    def invalidate(self, ns: int, key: bytes) -> None:
        old = self._items.pop((ns, key), None)
        if old is not None:
            self.size -= len(old)

    def invalidate_namespace(self, ns: int) -> None:
        for k in [k for k in self._items if k[0] == ns]:
            self.size -= len(self._items.pop(k))
