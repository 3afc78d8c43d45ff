"""A bucket out of room: Ceph RGW's bucket quota refuses the store's writes (403
QuotaExceeded) under a write stream, with no ``--capacity`` set. Real parts only: Ceph RGW on
loopback (``pytest --rgw``)."""

from __future__ import annotations

import asyncio
import time

import pytest

from s3kv.errors import BackendError, Backpressure
from s3kv.sizes import KiB, MiB
from tests.store.conftest import open_s3
from tests.store.helpers import block, open_store
from tests.support.rgw import RGWCluster

pytestmark = pytest.mark.rgw
QUOTA = 60 * MiB


async def test_a_full_bucket_makes_the_store_evict_not_lose_writes(
        rgw_server: RGWCluster) -> None:
    """The first refusals fail the segments uploading then (their blocks are lost, as in any
    failed upload); from then on the store keeps what it stores under what the bucket held
    when it refused (its capacity budget, learnt), evicting whole segments: no further segment
    fails, writes go on, and what it still indexes reads back. Before, a HEAD probe let writes
    in again at once and every segment after failed too (41 in 25 s, every acknowledged block
    lost)."""
    backend = await open_s3(rgw_server.endpoint, "full", request_timeout=10.0)
    rgw_server.set_bucket_quota("full", QUOTA)
    store = await open_store(backend, segment_size=20 * MiB, part_size=5 * MiB,
                             backend_timeout=30.0, max_open_segments=3)
    acked: dict[bytes, bytes] = {}
    try:
        await store.create_namespace("kvns")
        i, t0 = 0, time.monotonic()
        first_failure: tuple[int, int] | None = None  # (segments failed, blocks acked) then
        while time.monotonic() - t0 < 12:
            key, data = f"k{i:06d}".encode(), block(i, 256 * KiB)
            try:
                await store.put("kvns", key, data)
            except (Backpressure, BackendError):
                await asyncio.sleep(0.2)
                continue
            finally:
                if first_failure is None and store.stats.segments_failed:
                    first_failure = (store.stats.segments_failed, i)
            acked[key] = data
            i += 1
            await asyncio.sleep(0.002)
        await store.flush()
        assert first_failure is not None, "the quota was never reached"
        failed_then, acked_then = first_failure
        # the refusals came in one burst (segments uploading at once); none after
        assert store.stats.segments_failed <= failed_then + 2, store.stats.segments_failed
        assert store.summary()["capacity_bytes"] <= QUOTA
        assert store.stats.evictions > 0
        assert len(acked) > acked_then + 200  # writes went on for seconds after
        assert store.writer.health.healthy
        # every block still indexed (acknowledged after the refusals, not evicted) reads back
        kept = [k for k in acked if store.head("kvns", k) is not None]
        assert kept
        for key in kept[-100:]:
            assert await store.get("kvns", key) == acked[key]
    finally:
        await store.close()
        await backend.close()


async def test_a_bucket_too_small_for_two_segments_keeps_writes_refused(
        rgw_server: RGWCluster) -> None:
    """A quota under one segment: the first segment fails, and writes stay refused (503)
    rather than being let in to fail again; nothing else fails."""
    backend = await open_s3(rgw_server.endpoint, "tiny", request_timeout=10.0)
    rgw_server.set_bucket_quota("tiny", 8 * MiB)
    store = await open_store(backend, segment_size=20 * MiB, part_size=5 * MiB,
                             backend_timeout=30.0, max_open_segments=3)
    try:
        await store.create_namespace("kvns")
        refused, i, t0 = 0, 0, time.monotonic()
        while time.monotonic() - t0 < 6:
            try:
                await store.put("kvns", f"k{i:06d}".encode(), block(i, 256 * KiB))
                i += 1
            except (Backpressure, BackendError):
                refused += 1
                await asyncio.sleep(0.1)
        assert store.stats.segments_failed >= 1
        failed = store.stats.segments_failed
        await asyncio.sleep(2.0)  # a probe would have let writes in again by now
        with pytest.raises(Backpressure, match="backend full"):
            await store.put("kvns", b"after", block(0, 256 * KiB))
        assert store.stats.segments_failed == failed
        assert not store.writer.health.healthy
        assert 0 < store.summary()["capacity_bytes"] < 2 * 20 * MiB
    finally:
        await store.close()
        await backend.close()
