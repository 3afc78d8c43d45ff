"""The block store against the real S3 server (moto over HTTP) and the file backend."""

from __future__ import annotations

import asyncio
import os

import pytest

from s3kv.backends.base import Backend
from s3kv.errors import NamespaceNotFound, TooLarge
from s3kv.sizes import KiB, MiB
from s3kv.store import layout
from tests.store.helpers import (
    SEG,
    block,
    dangling,
    mostly_dead_segment,
    open_store,
    put_chain,
    segments_on_backend,
)


@pytest.mark.parametrize("size", [1, 4095, 4096, 4097, 256 * KiB, 2 * MiB])
async def test_round_trip_sizes(backend: Backend, size: int) -> None:
    store = await open_store(backend)
    try:
        await store.create_namespace("kvns")
        data = os.urandom(size)
        await store.put("kvns", b"k", data)
        assert await store.get("kvns", b"k") == data  # from the open segment
        await store.flush()
        assert store.writer.open_segments == 0
        assert await store.get("kvns", b"k") == data  # from the backend
        meta = store.head("kvns", b"k")
        assert meta is not None and meta.size == size
    finally:
        await store.close()


async def test_too_large_and_unknown_namespace(backend: Backend) -> None:
    store = await open_store(backend)
    try:
        await store.create_namespace("kvns")
        with pytest.raises(TooLarge):
            await store.put("kvns", b"big", b"x" * (2 * MiB + 1))
        with pytest.raises(NamespaceNotFound):
            await store.put("nope", b"k", b"x")
        assert store.head("kvns", b"big") is None
    finally:
        await store.close()


async def test_segment_sizes_alignment_and_format(backend: Backend) -> None:
    store = await open_store(backend, seal_after=30)
    written: dict[bytes, bytes] = {}
    try:
        await store.create_namespace("kvns")
        for i in range(60):  # ~ 60 * 700 KiB = 41 MiB: four full segments and a short one
            key = f"chain-{i:04d}".encode()
            written[key] = block(i, 700 * KiB + i)
            await store.put("kvns", key, written[key])
        await store.flush()
    finally:
        await store.close()
    sizes = await segments_on_backend(backend)
    assert len(sizes) >= 5
    ordered = sorted(sizes)
    assert all(sizes[n] == SEG for n in ordered[:-1]), sizes
    assert 0 < sizes[ordered[-1]] < SEG  # sealed early: simply shorter, no padding
    seen: dict[bytes, bytes] = {}
    for name in ordered:
        key = f"segments/{name}.seg"
        raw = await backend.get_object(key)
        moff, mlen, _ = layout.decode_trailer(raw[-layout.TRAILER_SIZE:])
        assert moff + mlen + layout.TRAILER_SIZE == len(raw)
        manifest = layout.Manifest.decode(raw[moff:moff + mlen])
        assert manifest.segment_length == len(raw)
        assert await backend.get_object(f"manifests/{name}.mf") == raw[moff:moff + mlen]
        for e in manifest.entries:
            assert e.offset % 4096 == 0
            body = raw[e.offset:e.offset + e.length]
            assert layout.checksum(body) == e.crc
            seen[e.key] = body
    assert seen == written


async def test_restart_recovery_with_and_without_sidecars(any_backend: Backend) -> None:
    store = await open_store(any_backend)
    written = {}
    try:
        await store.create_namespace("kvns")
        for i in range(30):
            key = f"k{i}".encode()
            written[key] = block(i, 512 * KiB)
            await store.put("kvns", key, written[key])
        await store.put("kvns", b"k0", b"overwritten")  # last writer wins across restarts
        written[b"k0"] = b"overwritten"
        assert await store.delete("kvns", b"k1")
        del written[b"k1"]
        await store.flush()
    finally:
        await store.close()

    async def check() -> None:
        again = await open_store(any_backend)
        try:
            assert again.list_namespaces() == ["kvns"]
            for key, data in written.items():
                assert await again.get("kvns", key) == data, key
            assert await again.get("kvns", b"k1") is None
            assert len(again.index) == len(written)
        finally:
            await again.close()

    await check()
    sidecars = [o.key for o in await any_backend.list_objects("manifests/")]
    assert sidecars
    await any_backend.delete_objects(sidecars)
    await check()  # footers are the source of truth


async def test_checksum_corruption_is_a_miss(backend: Backend, tmp_path: object) -> None:
    store = await open_store(backend)
    try:
        await store.create_namespace("kvns")
        good = os.urandom(64 * KiB)
        await store.put("kvns", b"a", good)
        await store.put("kvns", b"b", os.urandom(64 * KiB))
        await store.flush()
        (name,) = (await segments_on_backend(backend)).keys()
        seg_key = f"segments/{name}.seg"
        raw = bytearray(await backend.get_object(seg_key))
        loc = store.index.get(store.ns_id("kvns"), b"b")
        assert loc is not None
        raw[loc.offset + 100] ^= 0xFF  # flip one byte inside block b, on the backend
        await backend.put_object(seg_key, bytes(raw))
        store.dram.invalidate(store.ns_id("kvns"), b"b")
        assert await store.get("kvns", b"b") is None
        assert store.stats.checksum_failures == 1
        assert await store.get("kvns", b"a") == good
    finally:
        await store.close()


async def test_prefix_chain_reads_are_coalesced(backend: Backend) -> None:
    store = await open_store(backend, seal_after=30)
    try:
        await store.create_namespace("kvns")
        chain, blocks = await put_chain(store, 64, 64 * KiB, "h")
        before = store.stats.backend_reads
        got = await store.get_many("kvns", chain)
        assert got == blocks
        assert store.stats.backend_reads - before == 1  # 4 MiB chain, one segment: one GET
        leading, present = store.prefix_lookup("kvns", [*chain[:3], b"missing", chain[4]])
        assert leading == 3 and present == [True, True, True, False, True]
    finally:
        await store.close()


async def test_durable_put_is_on_backend_when_acknowledged(any_backend: Backend) -> None:
    store = await open_store(any_backend, seal_after=0.3)
    try:
        await store.create_namespace("kvns")
        await store.put("kvns", b"d", b"durable-bytes", durable=True)
        assert len(await segments_on_backend(any_backend)) == 1
    finally:
        await store.close()


async def test_eviction_keeps_bucket_under_capacity(backend: Backend) -> None:
    capacity = 3 * SEG
    store = await open_store(backend, capacity=capacity, seal_after=30, compact_threshold=0)
    keys = []
    try:
        await store.create_namespace("kvns")
        for i in range(80):  # ~ 80 MiB: eight segments
            key = f"e{i}".encode()
            keys.append(key)
            await store.put("kvns", key, block(i, MiB))
            if i % 10 == 9:
                await store.flush()
                await store.evict_now()
        await store.flush()
        await store.evict_now()
        on_backend = await segments_on_backend(backend)
        assert sum(on_backend.values()) <= capacity
        assert store.stats.evictions >= 4
        assert dangling(store, "kvns", keys, on_backend) == []  # none indexed, segment gone
        assert await store.get("kvns", keys[-1]) is not None  # the newest survive
        assert await store.get("kvns", keys[0]) is None  # the oldest went first
    finally:
        await store.close()


async def test_eviction_takes_the_coldest_segment_not_the_oldest(backend: Backend) -> None:
    store = await open_store(backend, capacity=3 * SEG, seal_after=30, compact_threshold=0)
    try:
        await store.create_namespace("kvns")
        for seg in range(3):  # three sealed segments of 8 MiB: within the capacity
            for i in range(8):
                await store.put("kvns", f"s{seg}-{i}".encode(), block(i, MiB))
            await store.flush()
        assert await store.evict_now() == 0
        await asyncio.sleep(0.01)
        assert await store.get("kvns", b"s0-3") is not None  # the oldest is read: warm
        for i in range(8):  # a fourth: over the capacity by one segment
            await store.put("kvns", f"s3-{i}".encode(), block(i, MiB))
        await store.flush()
        await store.evict_now()  # or the background round got there first
        assert store.stats.evictions == 1
        assert await store.get("kvns", b"s1-0") is None  # the coldest went
        for key in (b"s0-0", b"s2-0", b"s3-0"):
            assert await store.get("kvns", key) is not None
    finally:
        await store.close()


async def test_compaction_keeps_hot_blocks(backend: Backend) -> None:
    store = await open_store(backend, seal_after=30, compact_threshold=0.5,
                             compact_mode="compact", capacity=50 * SEG)
    try:
        hot = await mostly_dead_segment(store)
        written = store.head("kvns", b"c0").written_at  # type: ignore[union-attr]
        accepted = store.stats.bytes_accepted
        await store.evict_now()  # this round, or the background one it waited for
        assert store.stats.evictions >= 1
        assert store.stats.compactions == 1
        assert await store.get("kvns", b"c0") == hot  # hot: rewritten
        assert store.head("kvns", b"c0").written_at == written  # type: ignore[union-attr]
        assert await store.get("kvns", b"c7") is None  # cold: dropped with the segment
        assert store.stats.compaction_bytes == 512 * KiB
        assert store.stats.bytes_accepted == accepted
    finally:
        await store.close()


async def test_without_budget_live_blocks_stay_and_dead_segments_go(backend: Backend) -> None:
    store = await open_store(backend, seal_after=30, compact_threshold=0.5)  # no capacity
    try:
        await store.create_namespace("kvns")
        for i in range(8):
            await store.put("kvns", f"c{i}".encode(), block(i, 512 * KiB))
        await store.flush()
        for i in range(1, 8):  # live ratio 1/8, yet no budget asks for the space back
            await store.delete("kvns", f"c{i}".encode())
        assert await store.evict_now() == 0
        assert await store.get("kvns", b"c0") is not None
        await store.delete("kvns", b"c0")  # now nothing in it is live: it goes
        await store.flush()
        await store.evict_now()  # this round, or the background one it waited for
        assert store.stats.evictions >= 1
        names = {n for n in (await segments_on_backend(backend))}
        assert all(store.segments.by_name(n) is not None for n in names)
        assert store.stats.compactions == 0
    finally:
        await store.close()


async def test_two_instances_share_a_bucket(any_backend: Backend) -> None:
    a = await open_store(any_backend, node_id="node-a")
    b = await open_store(any_backend, node_id="node-b")
    try:
        await a.create_namespace("kvns")
        await a.put("kvns", b"from-a", b"A" * 5000)
        await a.flush()
        await b.recovery_sync()
        assert await b.get("kvns", b"from-a") == b"A" * 5000
        await b.put("kvns", b"from-b", b"B" * 7000)
        await b.flush()
        await a.recovery_sync()
        assert await a.get("kvns", b"from-b") == b"B" * 7000
    finally:
        await asyncio.gather(a.close(), b.close())


def test_long_chains_split_into_bounded_concurrent_runs() -> None:
    from s3kv.store.index import Location
    from s3kv.store.reader import MAX_RUN, plan_reads

    size = 896 * KiB
    wanted = [(i, Location(1, i * size, size, size, 0, 0, 0.0)) for i in range(64)]
    runs = plan_reads(list(reversed(wanted)))
    assert all(r.end - r.start <= MAX_RUN for r in runs)
    assert sum(len(r.members) for r in runs) == 64
    assert len(runs) == -(-64 * size // (MAX_RUN - MAX_RUN % size))
    assert [r.start for r in runs] == sorted(r.start for r in runs)


class _CountingBackend:
    """The real backend underneath; counts which write calls the store makes."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._inner, name)
        if name in ("put_object", "create_multipart", "upload_part", "complete_multipart"):
            async def counted(*args: object, **kwargs: object) -> object:
                what = name
                if name == "put_object":  # which kind of object: segments/, manifests/, ...
                    what = f"put_object:{str(args[0]).split('/', 1)[0]}"
                self.calls[what] = self.calls.get(what, 0) + 1
                return await attr(*args, **kwargs)
            return counted
        return attr


async def test_one_part_segments_are_single_puts(backend: Backend) -> None:
    """A segment that ends within its first part (every segment when part_size equals
    segment_size, and a short one) is one PUT: no multipart upload is created for it. Segments
    of several parts still go part by part."""
    counting = _CountingBackend(backend)
    written: dict[bytes, bytes] = {}
    for part_size in (SEG, SEG // 2):
        store = await open_store(counting, part_size=part_size, seal_after=30)  # type: ignore[arg-type]
        try:
            if part_size == SEG:
                await store.create_namespace("kvns")
            for i in range(32):  # 32 x 700 KiB: two full segments and a short one
                key = f"p{part_size}-{i:03d}".encode()
                written[key] = block(i, 700 * KiB)
                await store.put("kvns", key, written[key])
            await store.flush()
            sealed = store.stats.segments_sealed
        finally:
            await store.close()
        assert sealed == 3
        segment_puts = counting.calls.pop("put_object:segments", 0)
        sidecar_puts = counting.calls.pop("put_object:manifests", 0)
        counting.calls.pop("put_object:namespaces", None)
        assert sidecar_puts == 3
        if part_size == SEG:  # all three segments are single PUTs
            assert segment_puts == 3 and counting.calls == {}, counting.calls
        else:  # two full segments of two parts each; the short one (< 1 part) is one PUT
            assert segment_puts == 1
            assert counting.calls == {"create_multipart": 2, "upload_part": 4,
                                      "complete_multipart": 2}, counting.calls
        counting.calls.clear()
    sizes = await segments_on_backend(backend)
    assert sorted(sizes.values()).count(SEG) == 4
    store = await open_store(backend)
    try:
        got = await store.get_many("kvns", list(written))
        assert [bytes(g) if g is not None else None for g in got] == list(written.values())
    finally:
        await store.close()


async def test_a_callers_buffer_changed_after_put_does_not_change_the_block(
        backend: Backend) -> None:
    """The open segment keeps immutable pieces by reference and copies anything that could
    change: a caller that reuses its bytearray (or a writable view) after ``put`` returns
    must not rewrite what was stored, in memory or on the backend."""
    store = await open_store(backend, seal_after=30)
    try:
        await store.create_namespace("kvns")
        buf = bytearray(block(1, 700 * KiB))
        first = bytes(buf)
        await store.put("kvns", b"ba", buf)
        view = memoryview(buf)
        await store.put("kvns", b"mv", [view[:1000], view[1000:]])
        buf[:] = b"\xff" * len(buf)  # the caller reuses its buffer
        assert await store.get("kvns", b"ba") == first  # from the open segment
        assert await store.get("kvns", b"mv") == first
        await store.flush()
        assert await store.get("kvns", b"ba") == first  # from the backend
        assert await store.get("kvns", b"mv") == first
    finally:
        await store.close()

