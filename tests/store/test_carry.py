"""Deleting a segment never lets a restart bring back what its entries hid (carry.py): a deleted
block, a deleted bucket's blocks, an overwritten block's older value. The tombstones are
written again first, into a small segment of their own, and that segment goes once nothing
older is left for them to hide. Each scenario restarts the store on the same backend: moto, a
directory, and Ceph RGW with ``--rgw`` (``any_backend``)."""

from __future__ import annotations

import asyncio

import pytest

from s3kv.backends.base import Backend
from s3kv.sizes import KiB, MiB
from s3kv.store import eviction
from tests.store.helpers import (
    SEG,
    block,
    open_store,
    restart,
    segments_on_backend,
    tombstone_in_a_dead_segment,
)

NS = "kvns"


async def test_a_deleted_block_stays_deleted_after_its_segment_goes(any_backend: Backend) -> None:
    backend = any_backend
    store = await open_store(backend, seal_after=30)
    try:
        await tombstone_in_a_dead_segment(store, NS)  # A: k1, k2; B (dead): k3, tombstones
        before = set(await segments_on_backend(backend))
        assert await store.evict_now() == 1  # B, dead
        # k1's (A holds its put), and k3's: the index knows nothing of older puts, so every
        # tombstone newer than the oldest entry elsewhere is carried
        assert store.stats.tombstones_carried == 2
        assert len(set(await segments_on_backend(backend)) - before) == 1  # the carrier
        store = await restart(store, backend)
        assert await store.get(NS, b"k1") is None
        assert store.head(NS, b"k1") is None
        assert [m.key for m in (await store.list_blocks(NS))[0]] == [b"k2"]  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_a_deleted_bucket_stays_deleted_after_its_segments_go(any_backend: Backend) -> None:
    backend = any_backend
    store = await open_store(backend, seal_after=30)
    try:
        await store.create_namespace(NS)
        await store.create_namespace("gone")
        await store.put("gone", b"k", block(1, 64 * KiB))
        await store.put(NS, b"keep", block(2, 64 * KiB))
        await store.flush()  # A: gone/k, kvns/keep
        await store.delete("gone", b"k")
        await store.put(NS, b"tmp", block(3, 64 * KiB))
        await store.delete(NS, b"tmp")
        await store.flush()  # B: dead, with gone/k's tombstone
        await store.delete_namespace("gone")
        assert await store.evict_now() == 1
        store = await restart(store, backend)
        assert store.list_namespaces() == [NS]
        assert await store.get(NS, b"keep") is not None
    finally:
        await store.close()


async def test_an_evicted_overwrite_does_not_bring_the_old_value_back(any_backend: Backend) -> None:
    backend = any_backend
    over = {"capacity": 4 * SEG, "compact_threshold": 0.5, "compact_mode": "drop"}
    store = await open_store(backend, seal_after=30, **over)
    try:
        await store.create_namespace(NS)
        await store.put(NS, b"k", block(1, 64 * KiB))
        await store.put(NS, b"big", block(2, 512 * KiB))
        await store.flush()  # A: k (old value), big: mostly live once k is overwritten
        await store.put(NS, b"k", block(3, 64 * KiB))
        await store.put(NS, b"tmp", block(4, 512 * KiB))
        await store.delete(NS, b"tmp")
        await store.flush()  # B: k (new value), tmp (deleted): live ratio 1/9, dropped
        assert await store.evict_now() == 1
        assert await store.get(NS, b"k") is None  # evicted with B
        assert store.stats.tombstones_carried == 2  # k's new value, and tmp's tombstone
        store = await restart(store, backend, **over)
        assert await store.get(NS, b"k") is None  # not the old value from A
        assert await store.get(NS, b"big") is not None
    finally:
        await store.close()


async def test_carried_tombstones_go_once_nothing_older_is_left(any_backend: Backend) -> None:
    backend = any_backend
    store = await open_store(backend, seal_after=30)
    try:
        await tombstone_in_a_dead_segment(store, NS)  # A: k1, k2; B (dead): k3, tombstones
        await store.evict_now()  # B goes, k1's and k3's tombstones are carried into C
        assert store.stats.tombstones_carried == 2
        await store.delete(NS, b"k2")
        await store.flush()  # D: k2's tombstone; A is dead now
        await store.evict_now()  # A goes: nothing older than it; then C and D hide nothing
        await store.evict_now()
        assert await segments_on_backend(backend) == {}
        assert store.stats.tombstones_carried == 2  # nothing more was carried
        store = await restart(store, backend)
        assert (await store.list_blocks(NS))[0] == []
    finally:
        await store.close()


async def test_segments_going_oldest_first_carry_nothing(any_backend: Backend) -> None:
    backend = any_backend
    store = await open_store(backend, seal_after=30)
    try:
        await store.create_namespace(NS)
        for round_ in range(3):  # each segment: its keys written, then deleted, in order
            keys = [f"r{round_}-{i}".encode() for i in range(4)]
            for i, key in enumerate(keys):
                await store.put(NS, key, block(i, 32 * KiB))
            await store.flush()
            for key in keys:
                await store.delete(NS, key)
            await store.flush()
        await store.evict_now()
        await store.evict_now()
        assert store.stats.tombstones_carried == 0
        assert await segments_on_backend(backend) == {}
    finally:
        await store.close()


async def test_carriers_still_needed_are_merged_into_one(any_backend: Backend) -> None:
    backend = any_backend
    """An old segment with a live block keeps every later tombstone needed (it could hide an
    older put), so carriers pile up, one per dead segment deleted; past MERGE_CARRIERS a round
    merges them into one, and the deleted blocks stay deleted across a restart."""
    n = eviction.MERGE_CARRIERS + 2
    store = await open_store(backend, seal_after=30)
    try:
        await store.create_namespace(NS)
        await store.put(NS, b"pin", block(0, 4 * KiB))
        for i in range(n):
            await store.put(NS, f"k{i}".encode(), block(i, 4 * KiB))
        await store.flush()  # A: pin and every k (pin keeps A, and the floor, old)
        for i in range(n):
            await store.put(NS, b"tmp", block(i, 4 * KiB))
            await store.delete(NS, f"k{i}".encode())
            await store.delete(NS, b"tmp")
            await store.flush()  # dead: it goes, its tombstones into a carrier
            await store.evict_now()
        carriers = [s for s in store.segments.sealed() if not s.blocks]
        assert 1 <= len(carriers) <= 2  # merged (and the one the last round carried into)
        assert len(await segments_on_backend(backend)) == 1 + len(carriers)  # A and carriers
        store = await restart(store, backend)
        assert [m.key for m in (await store.list_blocks(NS))[0]] == [b"pin"]  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_a_segment_dropped_before_its_overwrites_are_sealed_leaves_no_older_value(
        any_backend: Backend) -> None:
    """A mostly dead segment is dropped while what killed its blocks (an overwrite, a delete)
    is still in the open segment; a crash then loses those writes. The restart must not serve
    the value from before the dropped segment's (its own is gone): the dropped segment's
    overwritten and deleted keys leave tombstones too."""
    backend = any_backend
    over = {"capacity": 4 * SEG, "compact_threshold": 0.5, "compact_mode": "drop"}
    store = await open_store(backend, seal_after=30, **over)
    after = None
    try:
        await store.create_namespace(NS)
        await store.put(NS, b"k", block(1, 64 * KiB))
        await store.put(NS, b"d", block(2, 64 * KiB))
        await store.put(NS, b"r", block(9, 4 * KiB))
        await store.put(NS, b"big", big := block(3, 512 * KiB))
        await store.flush()  # A: the old values, kept (big is live)
        await store.delete(NS, b"r")
        await store.put(NS, b"k", block(4, 64 * KiB))
        await store.put(NS, b"d", block(5, 64 * KiB))
        await store.put(NS, b"small", block(6, 4 * KiB))
        await store.put(NS, b"tmp", block(7, 512 * KiB))
        await store.flush()  # B: r's delete, k's and d's newer values, small, tmp
        await store.put(NS, b"k", block(8, 64 * KiB))  # write-back, in the open segment
        await store.put(NS, b"r", block(10, 4 * KiB))
        await store.delete(NS, b"d")
        await store.delete(NS, b"tmp")  # B's live ratio falls to 4/644: dropped
        assert await store.evict_now() == 1
        # a crash now (the store is never closed: its open segment is lost); a restart
        after = await open_store(backend, seal_after=30, node_id="after-crash", **over)
        assert await after.get(NS, b"k") is None  # not A's value
        assert await after.get(NS, b"d") is None  # not A's value
        assert await after.get(NS, b"r") is None  # deleted in B: not A's value
        assert await after.get(NS, b"big") == big
    finally:
        await store.close()
        if after is not None:
            await after.close()


async def test_a_block_that_failed_its_checksum_does_not_uncover_its_older_value(
        any_backend: Backend) -> None:
    """k was written twice, in two segments; the newer copy is corrupt on the backend: a read
    is a miss and the store forgets k, so its segment is dead and goes. Its entry still hid
    the older copy: a restart misses k (as before the eviction). Before, no tombstone was
    carried (the index no longer pointed into the segment) and the restart served the older,
    overwritten value."""
    backend = any_backend
    store = await open_store(backend, seal_after=30)
    try:
        await store.create_namespace(NS)
        await store.put(NS, b"k", block(1, 8 * KiB))
        await store.put(NS, b"keep", block(2, 8 * KiB))  # the first segment stays alive
        await store.flush()
        first = set(await segments_on_backend(backend))
        await store.put(NS, b"k", block(3, 8 * KiB))
        await store.flush()
        (second,) = set(await segments_on_backend(backend)) - first
        loc = store.index.get(store.ns_id(NS), b"k")
        assert loc is not None
        raw = bytearray(await backend.get_object(f"segments/{second}.seg"))
        raw[loc.offset + 9] ^= 0xFF  # a byte of the newer copy, on the backend
        await backend.put_object(f"segments/{second}.seg", bytes(raw))
        assert await store.get(NS, b"k") is None
        assert store.stats.checksum_failures == 1
        assert await store.evict_now() == 1  # the second segment, dead
        assert second not in await segments_on_backend(backend)
        store = await restart(store, backend)
        assert await store.get(NS, b"k") is None
        assert store.head(NS, b"k") is None
    finally:
        await store.close()


@pytest.mark.parametrize("delete_first", [True, False])
async def test_a_delete_racing_the_eviction_of_its_segment_never_uncovers_the_older_value(
        backend: Backend, delete_first: bool) -> None:
    """k's older value is in a hot segment, its newer one in the coldest, which the capacity
    evicts while k is deleted (both orders on the loop; the delete's segment opening runs an
    eviction round too). A store started meanwhile (the first one never sealed its delete: a
    crash) misses k or serves the newer value, and a restart misses it: never the older."""
    store = await open_store(backend, node_id="n", seal_after=30, capacity=21 * MiB)
    try:
        await store.create_namespace(NS)
        old, new = block(1, MiB), block(2, MiB)
        for value, other in ((old, b"o"), (new, b"p")):  # two segments of 7 MiB
            await store.put(NS, b"k", value)
            for i in range(3):
                await store.put(NS, other + b"%d" % i, block(3, 2 * MiB))
            await store.flush()
        assert await store.get(NS, b"o0") is not None  # the older segment is read: hot
        jobs = [store.delete(NS, b"k"), store.evict_now()]
        await asyncio.gather(*(jobs if delete_first else jobs[::-1]))
        crashed = await open_store(backend, node_id="m", seal_after=30)
        try:
            assert await crashed.get(NS, b"k") in (None, new)
        finally:
            await crashed.close()
        store = await restart(store, backend, node_id="n")
        assert await store.get(NS, b"k") is None
    finally:
        await store.close()
