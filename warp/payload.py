"""Shared pre-generated payloads and the checksums of what was written.

Every object's bytes are a window onto one shared random buffer: object variant ``v`` of size
``n`` is ``base[(start(v) + i) % len(base)]`` for ``i < n``. PUTs stream memoryview slices of
that buffer (no per-op copy of an object ever exists), GETs hash the bytes as they arrive and
compare with the hash of the same window, computed once per (variant, offset, length) and
cached. The variant of a key is a function of the key alone, so any client process, local or
remote, can verify any object it did not write itself.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import xxhash

from s3kv.sizes import MiB

#: distinct payload variants (different windows onto the shared buffer)
VARIANTS = 16
#: size of the shared random buffer; objects larger than this repeat it
BASE_SIZE = 8 * MiB
#: PUT bodies are written to the socket in slices of this size
SLICE = 1 * MiB


def variant_of(key: str) -> int:
    return zlib.crc32(key.encode()) % VARIANTS


class Hasher:
    """Streaming checksum of a body (xxh3-64: ~14 GiB/s on one core, so never the bottleneck)."""

    __slots__ = ("_h", "size")

    def __init__(self) -> None:
        self._h = xxhash.xxh3_64()
        self.size = 0

    def update(self, data: bytes | memoryview) -> None:
        self._h.update(data)
        self.size += len(data)

    def digest(self) -> int:
        return int(self._h.intdigest())


@dataclass(frozen=True)
class Expected:
    """What a read must return: its length and the checksum of the bytes written there."""

    length: int
    checksum: int


class PayloadSource:
    """One per client process: the shared buffer, body slices and cached expected checksums."""

    def __init__(self, seed: int, base_size: int = BASE_SIZE, slice_size: int = 0) -> None:
        # Random (incompressible) and a pure function of the seed: every client process of a
        # run, local or remote, holds the same buffer and so can verify any object of the run.
        self._base = memoryview(random.Random(seed).randbytes(base_size))
        self._slice = slice_size or SLICE
        self._cache: dict[tuple[int, int, int], int] = {}

    @property
    def base_size(self) -> int:
        return len(self._base)

    def _start(self, variant: int) -> int:
        return (variant * (len(self._base) // VARIANTS) + variant * 4099) % len(self._base)

    def slices(self, variant: int, offset: int, length: int) -> Iterator[memoryview]:
        """The bytes of ``[offset, offset+length)`` of a variant, as views of the shared buffer."""
        size = len(self._base)
        pos = (self._start(variant) + offset) % size
        left = length
        while left > 0:
            n = min(left, self._slice, size - pos)
            yield self._base[pos:pos + n]
            left -= n
            pos = (pos + n) % size

    def expected(self, variant: int, offset: int, length: int) -> Expected:
        key = (variant, offset, length)
        digest = self._cache.get(key)
        if digest is None:
            h = Hasher()
            for view in self.slices(variant, offset, length):
                h.update(view)
            digest = h.digest()
            if len(self._cache) > 65536:
                self._cache.clear()
            self._cache[key] = digest
        return Expected(length, digest)

