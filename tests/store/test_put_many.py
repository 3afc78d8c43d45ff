"""A batch of blocks lands as one byte range: concurrent batches do not interleave, so a chain
written in one request is read back with one ranged GET."""

from __future__ import annotations

import asyncio

import pytest

from s3kv.backends.base import Backend
from s3kv.errors import TooLarge
from s3kv.sizes import KiB, MiB
from tests.store.helpers import SEG, block, open_store

UPLOADS = ("put_object", "upload_part", "complete_multipart")


class _GatedUploads:
    """The real backend underneath; segment uploads wait until ``gate`` is set, so the writer
    runs out of room and holds its queue (as it does when the backend is slower than the
    write stream)."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.gate = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._inner, name)
        if name not in UPLOADS:
            return attr

        async def gated(*args: object, **kwargs: object) -> object:
            if str(args[0]).startswith("segments/"):
                await self.gate.wait()
            return await attr(*args, **kwargs)
        return gated


async def test_concurrent_batches_each_land_contiguous_and_read_back_in_one_get(
        backend: Backend) -> None:
    gated = _GatedUploads(backend)
    store = await open_store(gated, part_size=SEG, max_open_segments=1,  # type: ignore[arg-type]
                             seal_after=5)
    try:
        await store.create_namespace("kvns")
        for i in range(9):  # nine 1 MiB blocks: the next one opens a second segment
            await store.put("kvns", f"fill{i}".encode(), block(i, MiB))
        # the first segment cannot upload yet: this put waits for room, holding the queue
        waiting = asyncio.create_task(store.put("kvns", b"next", block(99, MiB)))
        await asyncio.sleep(0.05)
        chains = {name: [(f"{name}{i}".encode(), block(i, 256 * KiB)) for i in range(6)]
                  for name in ("a", "b", "c")}
        batches = [asyncio.create_task(store.put_many("kvns", items))
                   for items in chains.values()]
        await asyncio.sleep(0.05)  # every batch is queued behind the waiting put
        gated.gate.set()
        await waiting
        assert await asyncio.gather(*batches) == [6, 6, 6]
        for items in chains.values():
            locs = [store.index.get(store.ns_id("kvns"), k) for k, _ in items]
            assert all(loc is not None for loc in locs)
            assert len({loc.segment for loc in locs if loc}) == 1
            offsets = [loc.offset for loc in locs if loc]
            assert offsets == list(range(offsets[0], offsets[0] + 6 * 256 * KiB, 256 * KiB))
        await store.flush()
        for items in chains.values():
            before = store.stats.backend_reads
            got = await store.get_many("kvns", [k for k, _ in items])
            assert got == [d for _, d in items]
            assert store.stats.backend_reads - before == 1
    finally:
        gated.gate.set()
        await store.close()


async def test_a_bad_block_stores_none_of_its_batch(backend: Backend) -> None:
    store = await open_store(backend)
    try:
        await store.create_namespace("kvns")
        items = [(b"ok0", block(0, KiB)), (b"big", block(1, 3 * MiB)), (b"ok2", block(2, KiB))]
        with pytest.raises(TooLarge):
            await store.put_many("kvns", items)
        assert store.prefix_lookup("kvns", [b"ok0", b"big", b"ok2"]) == (0, [False] * 3)
    finally:
        await store.close()
