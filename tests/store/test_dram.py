"""The DRAM tier: filled on write and on read, never stale, charged for what it keeps alive."""

from __future__ import annotations

from contextlib import aclosing

from s3kv.backends.base import Backend
from s3kv.sizes import KiB, MiB
from s3kv.store.dram import DramCache, frozen_copy
from s3kv.store.index import Location
from tests.store.helpers import block, open_store


async def test_written_blocks_are_served_from_memory(backend: Backend) -> None:
    store = await open_store(backend, dram_cache=8 * MiB)
    try:
        await store.create_namespace("kvns")
        data = block(1, 300 * KiB)
        await store.put("kvns", b"k", data)
        await store.flush()  # sealed and on the backend: only the tier can serve it now
        reads = store.stats.backend_reads
        assert await store.get("kvns", b"k") == data
        assert store.stats.backend_reads == reads
        assert store.stats.dram_hits == 1 and store.stats.dram_misses == 0
    finally:
        await store.close()


async def test_read_fill_only_caches_what_was_read(backend: Backend) -> None:
    store = await open_store(backend, dram_cache=8 * MiB, dram_fill="read")
    try:
        await store.create_namespace("kvns")
        data = block(2, 300 * KiB)
        await store.put("kvns", b"k", data)
        await store.flush()
        assert store.dram.size == 0
        reads = store.stats.backend_reads
        assert await store.get("kvns", b"k") == data  # from the backend, then kept
        assert await store.get("kvns", b"k") == data  # from the tier
        assert store.stats.backend_reads == reads + 1
        assert (store.stats.dram_misses, store.stats.dram_hits) == (1, 1)
    finally:
        await store.close()


async def test_pieces_are_kept_and_sent_without_a_join(backend: Backend) -> None:
    store = await open_store(backend, dram_cache=16 * MiB)
    try:
        await store.create_namespace("kvns")
        pieces = [block(i, 256 * KiB) for i in range(8)]  # 2 MiB as a body arrives
        await store.put("kvns", b"k", pieces)
        async with aclosing(store.iter_many("kvns", [b"k"])) as blocks:
            got = [b async for b in blocks]
        assert isinstance(got[0], tuple) and all(
            a is b for a, b in zip(got[0], pieces, strict=True))  # the very same buffers
        assert await store.get("kvns", b"k") == b"".join(pieces)  # the Python API joins
        assert await store.read("kvns", b"k") == got[0]
    finally:
        await store.close()


async def test_a_replicas_newer_write_is_never_served_stale(backend: Backend) -> None:
    a = await open_store(backend, node_id="node-a", dram_cache=8 * MiB)
    b = await open_store(backend, node_id="node-b", dram_cache=8 * MiB, dram_fill="read")
    try:
        await a.create_namespace("kvns")
        await b.recovery_sync()
        old, new = block(3, 64 * KiB), block(4, 64 * KiB)
        await a.put("kvns", b"k", old)
        await a.flush()
        await b.recovery_sync()
        assert await b.get("kvns", b"k") == old  # read from the backend: now in b's tier
        assert await b.get("kvns", b"k") == old and b.stats.dram_hits == 1
        await a.put("kvns", b"k", new)
        await a.flush()
        await b.recovery_sync()  # b's index points at the new block; its tier held the old
        assert await b.get("kvns", b"k") == new
        assert await a.get("kvns", b"k") == new
    finally:
        await a.close()
        await b.close()


def _loc(n: int) -> Location:
    return Location(1, n * 4096, 10, 10, n, 0, 0.0)


def test_entries_are_charged_for_the_buffers_they_keep_alive() -> None:
    tier = DramCache(64 * MiB)
    received = bytes(4 * MiB)  # one received buffer, two large blocks in views of it
    halves = memoryview(received)
    tier.put(1, b"a", _loc(1), (halves[:2 * MiB],))
    assert tier.size == 4 * MiB  # the view keeps all of ``received`` alive
    tier.put(1, b"a", _loc(2), b"x" * 100)
    assert tier.size == 100 and len(tier) == 1


def test_a_moved_block_misses_and_is_dropped() -> None:
    tier = DramCache(1 * MiB)
    tier.put(1, b"a", _loc(1), b"v1")
    assert tier.get(1, b"a", _loc(1)) == b"v1"
    assert tier.get(1, b"a", _loc(2)) is None  # the index moved on (compaction, a replica)
    assert len(tier) == 0 and tier.size == 0
    tier.put(1, b"big", _loc(3), bytes(MiB // 4 + 1))  # over a quarter of the tier: skipped
    assert len(tier) == 0


def test_mutable_blocks_are_copied_on_the_way_in_and_immutable_ones_kept() -> None:
    big = bytes(MiB)
    small_view = memoryview(big)[:4096]
    kept = frozen_copy([small_view])
    assert isinstance(kept, tuple) and kept[0] is small_view  # kept; the tier counts ``big``
    buf = bytearray(b"y" * (2 * MiB))
    kept = frozen_copy([memoryview(buf)[:MiB], memoryview(buf)[MiB:]])
    buf[0] = 0
    assert isinstance(kept, bytes) and kept[0] == ord("y")  # the caller may reuse its buffer
    pieces = [bytes(MiB), bytes(MiB)]
    kept = frozen_copy(pieces)
    assert isinstance(kept, tuple) and kept[0] is pieces[0]


def test_a_buffer_shared_by_entries_is_counted_once_until_the_last_leaves() -> None:
    tier = DramCache(16 * MiB)
    received = bytes(4 * MiB)  # one socket read of a batch put: 16 blocks of 256 KiB
    view = memoryview(received)
    for i in range(16):
        tier.put(1, b"k%d" % i, _loc(i), (view[i * 256 * KiB:(i + 1) * 256 * KiB],))
    assert (len(tier), tier.size) == (16, 4 * MiB)
    for i in range(15):
        tier.invalidate(1, b"k%d" % i)
    assert (len(tier), tier.size) == (1, 4 * MiB)  # the last view still keeps it alive
    tier.invalidate(1, b"k15")
    assert (len(tier), tier.size) == (0, 0)


def test_eviction_goes_on_until_what_is_kept_alive_fits() -> None:
    tier = DramCache(16 * MiB)
    first, second, third = bytes(4 * MiB), bytes(4 * MiB), bytes(4 * MiB)
    tier.put(1, b"a", _loc(1), (memoryview(first)[:KiB],))
    tier.put(1, b"b", _loc(2), (memoryview(second)[:KiB],))
    tier.put(1, b"c", _loc(3), (memoryview(first)[KiB:2 * KiB],))  # ``first`` again: no charge
    tier.put(1, b"e", _loc(4), (memoryview(third)[:KiB],))
    tier.put(2, b"d", _loc(5), bytes(4 * MiB))
    assert (len(tier), tier.size) == (5, 16 * MiB)
    tier.put(2, b"f", _loc(6), bytes(2 * MiB))  # over: "a" goes, but ``first`` lives on in
    # "c"; then "b" goes, and ``second`` with it
    assert tier.get(1, b"a", _loc(1)) is None and tier.get(1, b"b", _loc(2)) is None
    assert (len(tier), tier.size) == (4, 14 * MiB)
    tier.invalidate_namespace(1)  # "c" and "e": ``first`` and ``third``
    assert (len(tier), tier.size) == (2, 6 * MiB)
