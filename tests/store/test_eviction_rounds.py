"""Eviction rounds: they do not overlap (a round asked for while another deletes waits for
it), and a segment about to open has one run for it, counting it at its full size (waited
for on the file backend, whose next segment reuses the file freed; only woken on S3); a
compaction reads its hot blocks together; a round the writer refuses (Backpressure) neither
ends the loop nor the round."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from s3kv.backends import FileBackend
from s3kv.backends.base import Backend
from s3kv.sizes import KiB, MiB
from s3kv.store import eviction
from s3kv.store.segments import segment_key, sidecar_key
from tests.store.conftest import open_s3
from tests.store.helpers import (
    SEG,
    block,
    dangling,
    mostly_dead_segment,
    open_store,
    segments_on_backend,
    tombstone_in_a_dead_segment,
)
from tests.support.s3server import MotoServer


class _HeldDeletes:
    """The real backend underneath; ``delete_objects`` waits until ``release`` is set."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.deleting = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def delete_objects(self, keys: list[str]) -> None:
        self.deleting.set()
        await self.release.wait()
        await self._inner.delete_objects(keys)


async def test_a_round_waits_for_the_round_in_flight(tmp_path: Path) -> None:
    """The background loop's round can be mid-delete (its segment EVICTING: gone from the
    backend, still indexed) when ``evict_now`` is called. ``evict_now`` finds nothing left to
    choose, yet must not return before that round has forgotten the segment's blocks: callers
    read "after evict_now, no indexed block points at a deleted segment"."""
    inner = await FileBackend(tmp_path / "store").open()
    held = _HeldDeletes(inner)
    store = await open_store(held, capacity=2 * SEG, seal_after=30,  # type: ignore[arg-type]
                             compact_threshold=0)
    try:
        await store.create_namespace("kvns")
        for i in range(20):  # 9 + 9 + 2 blocks: one segment over a two-segment budget
            await store.put("kvns", f"r{i}".encode(), block(i, MiB))
        await store.flush()
        first = asyncio.create_task(store.evict_now())  # stands for the loop's round
        await asyncio.wait_for(held.deleting.wait(), 5)
        second = asyncio.create_task(store.evict_now())
        await asyncio.sleep(0.2)
        assert not second.done(), "evict_now returned while a round was still deleting"
        held.release.set()
        await asyncio.wait_for(asyncio.gather(first, second), 5)
        assert store.stats.evictions >= 1
        keys = [f"r{i}".encode() for i in range(20)]
        assert dangling(store, "kvns", keys, await segments_on_backend(inner)) == []
    finally:
        held.release.set()
        await store.close()
        await inner.close()


async def test_the_segment_taking_writes_counts_at_its_full_size(tmp_path: Path) -> None:
    """Space is freed ahead of the segment taking writes: before a segment opens, a round
    counting it at its full size runs and the write waits for it, and on the file backend the
    segment is written over the evicted one's file instead of fresh pages. (Counted at what
    it held, 1 MiB, the store would be at 21 of its 25 MiB here, and nothing would be evicted
    until it had overrun.)"""
    backend = await FileBackend(tmp_path / "store").open()
    store = await open_store(backend, capacity=25 * MiB, seal_after=60, compact_threshold=0)
    try:
        await store.create_namespace("kvns")
        for i in range(18):  # 9 + 9 blocks: two segments, both sealed by the flush
            await store.put("kvns", f"r{i}".encode(), block(i, MiB))
        await store.flush()
        assert store.stats.evictions == 0  # 19 of 25 MiB
        await store.put("kvns", b"r18", block(18, MiB))  # opens a third
        assert store.stats.evictions == 1  # before that put returned
        assert backend.recycled.reused == 0  # the third segment's file is not made yet
        nid = store.ns_id("kvns")
        # one of the two sealed segments went (the colder: whichever sealed first)
        assert [store.index.get(nid, k) is None for k in (b"r0", b"r9")].count(True) == 1
        assert store.index.get(nid, b"r18") is not None  # not the one taking writes
        for i in range(19, 27):  # the third segment's second part: its file is made
            await store.put("kvns", f"r{i}".encode(), block(i, MiB))
        await store.flush()
        assert backend.recycled.reused == 1
    finally:
        await store.close()
        await backend.close()


async def test_on_s3_a_write_does_not_wait_for_the_round_it_wakes(
        s3_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On an S3 backend the space a delete frees is not what the next segment is written
    into, so a write opening a segment at the capacity wakes the round and goes on: here the
    round's delete is held, and the write returns all the same, well before the longest a
    write would wait for it (raised to 5 s here)."""
    monkeypatch.setattr(eviction, "ROOM_WAIT", 5.0)
    inner = await open_s3(s3_server.endpoint, bucket)
    held = _HeldDeletes(inner)
    store = await open_store(held, capacity=25 * MiB, seal_after=60,  # type: ignore[arg-type]
                             compact_threshold=0)
    try:
        await store.create_namespace("kvns")
        for i in range(18):  # two segments, sealed by the flush: 19 of 25 MiB
            await store.put("kvns", f"r{i}".encode(), block(i, MiB))
        await store.flush()
        await asyncio.wait_for(store.put("kvns", b"r18", block(18, MiB)), 2)  # opens a third
        await asyncio.wait_for(held.deleting.wait(), 5)  # its round is deleting, held
        assert store.stats.evictions == 0
        held.release.set()
        await asyncio.wait_for(store.evict_now(), 5)  # waits for that round
        assert store.stats.evictions == 1
    finally:
        held.release.set()
        await store.close()
        await inner.close()


async def test_compaction_reads_the_hot_blocks_together(backend: Backend) -> None:
    """A segment's hot blocks are read back for their rewrite as coalesced ranged GETs, not
    one GET per block (eight adjacent hot blocks: one read; eight before)."""
    store = await open_store(backend, seal_after=30, compact_threshold=0.5,
                             compact_mode="compact", capacity=50 * SEG)
    try:
        await store.create_namespace("kvns")
        blocks = {f"c{i:02d}".encode(): block(i, 256 * KiB) for i in range(24)}
        for key, data in blocks.items():
            await store.put("kvns", key, data)
        await store.flush()
        hot = [f"c{i:02d}".encode() for i in range(8)]
        for key in hot:  # read since written: hot
            assert await store.get("kvns", key) == blocks[key]
        for i in range(8, 21):  # live ratio 11/24
            await store.delete("kvns", f"c{i:02d}".encode())
        reads = store.stats.backend_reads
        await store.evict_now()
        assert store.stats.compactions == 1
        assert store.stats.backend_reads - reads == 1
        for key in hot:
            assert await store.get("kvns", key) == blocks[key]
        assert await store.get("kvns", b"c21") is None  # cold: dropped with the segment
    finally:
        await store.close()


async def test_the_loop_outlives_a_round_the_writer_refuses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round that writes (a carrier of tombstones, a compaction's rewrites) while the backend
    is marked down meets Backpressure, not a BackendError: the loop logs it and its next round
    evicts, instead of ending (before, it ended for good, and the capacity went unenforced)."""
    monkeypatch.setattr(eviction, "INTERVAL", 0.02)  # the probe marks the backend up at 0.25 s
    backend = await FileBackend(tmp_path / "store").open()
    store = await open_store(backend, seal_after=30)
    try:
        await tombstone_in_a_dead_segment(store)  # B's deletion carries k1's tombstone
        store.writer.health.mark_down("test: an upload failed")
        refused = store.stats.backpressure_rejections
        for _ in range(100):
            await asyncio.sleep(0.02)
            if store.stats.evictions:
                break
        assert store.stats.backpressure_rejections > refused  # a round met the outage
        assert store.stats.evictions == 1 and store.stats.tombstones_carried == 2
    finally:
        await store.close()
        await backend.close()


async def test_a_compaction_the_writer_refuses_is_deferred(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its rewrites meet Backpressure (the backend marked down): the segment is kept whole for
    a later round, and the round goes on, rather than ending with the error. On the file
    backend, with the loop's rounds far apart: only ``evict_now`` compacts here."""
    monkeypatch.setattr(eviction, "INTERVAL", 3600.0)
    backend = await FileBackend(tmp_path / "store").open()
    store = await open_store(backend, seal_after=30, compact_threshold=0.5,
                             compact_mode="compact", capacity=50 * SEG)
    try:
        hot = await mostly_dead_segment(store)
        await store.flush()
        store.writer.health.mark_down("test: an upload failed")
        await store.evict_now()  # no error: deferred
        assert store.stats.compactions == 0 and await store.get("kvns", b"c7") is not None
        store.writer.health.mark_up()
        await store.evict_now()
        assert store.stats.compactions == 1 and await store.get("kvns", b"c0") == hot
    finally:
        await store.close()
        await backend.close()


async def test_a_compacted_segment_goes_once_its_hot_blocks_are_on_the_backend(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash right after a compaction (here: a second store opened on the directory while
    the first, never closed, holds its open segment) still finds the hot blocks it rewrote.
    Before, the old segment was deleted at once, and a crash within ``seal_after`` lost blocks
    that had been durable."""
    monkeypatch.setattr(eviction, "INTERVAL", 3600.0)  # only evict_now compacts
    backend = await FileBackend(tmp_path / "store").open()
    store = await open_store(backend, seal_after=1, compact_threshold=0.5,
                             compact_mode="compact", capacity=50 * SEG)
    try:
        hot = await mostly_dead_segment(store)  # sealed: durable
        await store.evict_now()
        assert store.stats.compactions == 1
        after_crash = await open_store(await FileBackend(tmp_path / "store").open())
        try:
            assert await after_crash.get("kvns", b"c0") == hot
        finally:
            await after_crash.close()
            await after_crash.backend.close()
    finally:
        await store.close()
        await backend.close()


async def test_a_segment_another_replica_deleted_does_not_stop_the_round(
        backend: Backend) -> None:
    """Replicas share a bucket and each evicts by the same budget, so one may delete a segment
    the other still indexes (until its next sync). Evicting that segment then found no manifest
    to carry tombstones from (NoSuchKey), and every round failed on it until the sync forgot it
    (a soak of two gateways on Ceph RGW: `eviction.failed` every round); the other replica has
    carried what it hid, so it is forgotten and the round goes on."""
    store = await open_store(backend, capacity=2 * SEG, seal_after=30, compact_threshold=0)
    try:
        await store.create_namespace("kvns")
        keys = [[f"s{s}-{i}".encode() for i in range(9)] for s in range(3)]

        async def fill(s: int) -> None:  # a sealed segment of 9 MiB
            for i, key in enumerate(keys[s]):
                await store.put("kvns", key, block(i, MiB))
            await store.flush()

        await fill(0)
        await fill(1)
        assert await store.get("kvns", keys[0][0]) is not None  # s0 read: s1 is the coldest
        loc = store.index.get(store.ns_id("kvns"), keys[1][0])
        assert loc is not None
        gone = store.segments.get(loc.segment)
        assert gone is not None
        await backend.delete_objects([segment_key("", gone.name), sidecar_key("", gone.name)])
        await fill(2)  # one segment over the budget: s1 goes (a round the writes woke, or this)
        await store.evict_now()  # raised BackendError (NoSuchKey), as every round did
        assert store.stats.evictions == 1
        assert store.segments.get(gone.seg_id) is None
        assert [await store.get("kvns", k) for k in keys[1]] == [None] * 9
        assert sorted(await segments_on_backend(backend)) == sorted(
            s.name for s in store.segments.all() if s.blocks)
    finally:
        await store.close()
