"""An empty block is a live block: an S3 empty object or directory marker (``dir/``) is kept
like any other. Eviction once judged segments by their bytes, so a segment whose live blocks
were all empty counted as dead and one holding only empty blocks as a carrier of tombstones,
and both were deleted without a capacity budget, losing acknowledged empty objects (found by
a soak of S3 clients on the gateway: an empty PUT answered 200, then HEAD 404). Each scenario
also restarts the store on the same backend (recovery counts the blocks the same way): moto, a
directory, and Ceph RGW with ``--rgw`` (``any_backend``)."""

from __future__ import annotations

from s3kv.backends.base import Backend
from s3kv.sizes import KiB
from s3kv.store.store import BlockStore
from tests.store.helpers import block, open_store, restart, segments_on_backend

NS = "kvns"


async def _evict_and_restart(store: BlockStore, backend: Backend) -> BlockStore:
    await store.evict_now()
    store = await restart(store, backend)
    await store.evict_now()  # the restarted store judges the segments from their manifests
    return store


async def test_a_segment_whose_live_blocks_are_empty_is_not_dead(any_backend: Backend) -> None:
    backend = any_backend
    store = await open_store(backend, seal_after=30)
    try:
        await store.create_namespace(NS)
        await store.put(NS, b"dir/", b"")
        await store.put(NS, b"big", block(1, 64 * KiB))
        await store.flush()  # A: dir/ (empty), big
        await store.delete(NS, b"big")  # A has no live bytes left, one live block
        await store.flush()
        store = await _evict_and_restart(store, backend)
        assert await store.get(NS, b"dir/") == b""
        assert [m.key for m in (await store.list_blocks(NS))[0]] == [b"dir/"]  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_a_segment_of_empty_blocks_only_is_not_a_carrier(any_backend: Backend) -> None:
    backend = any_backend
    store = await open_store(backend, seal_after=30)
    try:
        await store.create_namespace(NS)
        await store.put(NS, b"a/", b"")
        await store.put(NS, b"b/", b"")
        await store.flush()  # A: two empty blocks, no bytes
        await store.put(NS, b"c", block(2, 64 * KiB))
        await store.delete(NS, b"c")
        await store.flush()  # B: dead (c and its tombstone); deleting it carries the tombstone
        store = await _evict_and_restart(store, backend)
        assert [await store.get(NS, k) for k in (b"a/", b"b/", b"c")] == [b"", b"", None]
        assert [m.key for m in (await store.list_blocks(NS))[0]] == [b"a/", b"b/"]  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_a_segment_whose_empty_blocks_are_all_gone_is_dead(any_backend: Backend) -> None:
    """The other side: once no block of it is live, empty ones included, it goes."""
    backend = any_backend
    store = await open_store(backend, seal_after=30)
    try:
        await store.create_namespace(NS)
        keep = block(3, 64 * KiB)
        await store.put(NS, b"keep", keep)
        await store.flush()  # A: keep
        first = set(await segments_on_backend(backend))
        await store.put(NS, b"e/", b"")
        await store.flush()  # B: e/ only
        (b,) = set(await segments_on_backend(backend)) - first
        await store.delete(NS, b"e/")
        await store.flush()  # C: e/'s tombstone
        await store.evict_now()
        assert b not in await segments_on_backend(backend)
        store = await _evict_and_restart(store, backend)
        assert await store.get(NS, b"e/") is None
        assert await store.get(NS, b"keep") == keep
    finally:
        await store.close()
