"""The digests of a request body, fed piece by piece as the body arrives (payload.py's reader).

A body may need up to four: MD5 (the ETag, or a Content-MD5 check), the SHA-256 of a signed
payload, the client's flexible checksum and the store's CRC-32 of the block (the same CRC the
segment manifest keeps, so the store does not make a pass of its own). One object may serve
two roles (a client's crc32 checksum *is* the store's CRC; a sha256 one is the payload hash).

Pieces are batched: once ``offload_bytes`` have gathered, the batch is hashed in a worker thread
while the loop reads on (hashlib and zlib-ng release the GIL on large buffers), one batch in
flight so that every digest sees the bytes in order; what is left is hashed by ``finish``, on
the loop if it is under ``ON_LOOP_BYTES``. A small body therefore costs no thread hop at all.
A hop costs ~135 us of CPU on the machines measured here (asyncio.to_thread round trip), as
much as CRC-32 over 1 MiB: batches of 4 MiB took a 32 MiB body's digests from 11.2 to 7.2 ms
of CPU (CRC only), while what ``finish`` hashes on the loop stays at most 1 MiB.

When every digest is a cheap one (``checksums.is_cheap``: the CRC-32 of ``--etag fast``, a
client's CRC checksum), each piece is hashed on the loop as it arrives instead: a piece just
received is still in the CPU's cache, the CRC runs at tens of GB/s (~10 us per 256 KiB piece,
~1 ms for a whole 32 MiB body, spread over its pieces), and the eight thread hops of a 32 MiB
body would cost about as much as the CRC itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from s3kv.gateway.checksums import Checksum, is_cheap
from s3kv.sizes import MiB

#: bytes gathered before a batch is hashed in a worker thread
OFFLOAD_BYTES = 4 * MiB
#: at the end of a body, what is left is hashed on the loop below this, in a thread above
ON_LOOP_BYTES = 1 * MiB


class BodyDigests:
    def __init__(self, hashers: Sequence[Checksum], offload_bytes: int = OFFLOAD_BYTES) -> None:
        # one object in two roles is updated once
        self._hashers = list({id(h): h for h in hashers}.values())
        self._offload = offload_bytes
        #: every digest cheap: each piece is hashed on the loop as it arrives (not named
        #: ``_inline``: mypyc emits that attribute as the C field ``__inline``, a keyword)
        self._on_loop = all(map(is_cheap, self._hashers))
        self._batch: list[bytes | memoryview] = []
        self._batch_bytes = 0
        #: the previous batch, hashing in a worker thread
        self._pending: asyncio.Future[None] | None = None

    def drop(self, hasher: Checksum) -> None:
        """``hasher`` is fed elsewhere from now on (before any piece)."""
        self._hashers = [h for h in self._hashers if h is not hasher]
        self._on_loop = all(map(is_cheap, self._hashers))

    async def feed(self, piece: bytes | memoryview) -> None:
        """Take the next piece of the body (kept, unchanged, until hashed)."""
        if self.add(piece):
            await self.spill()

    def add(self, piece: bytes | memoryview) -> bool:
        """:meth:`feed` without its await: True when a batch has gathered and ``await
        spill()`` must follow before the next piece (most pieces of most bodies need none)."""
        if not self._hashers:
            return False
        if self._on_loop:
            for h in self._hashers:
                h.update(piece)
            return False
        self._batch.append(piece)
        self._batch_bytes += len(piece)
        return self._batch_bytes >= self._offload

    async def spill(self) -> None:
        """Hash the gathered batch in a worker thread (after the previous one)."""
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        await self._drain()
        self._pending = asyncio.get_running_loop().run_in_executor(None, self._update, batch)

    async def finish(self) -> None:
        """Hash what is left; every digest is complete when this returns."""
        await self._drain()
        batch, size = self._batch, self._batch_bytes
        self._batch, self._batch_bytes = [], 0
        if not batch:
            return
        if size >= min(self._offload, ON_LOOP_BYTES):
            await asyncio.get_running_loop().run_in_executor(None, self._update, batch)
        else:
            self._update(batch)

    async def _drain(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            await pending

    def _update(self, batch: list[bytes | memoryview]) -> None:
        for h in self._hashers:
            for piece in batch:
                h.update(piece)
