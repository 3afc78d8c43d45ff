"""Waiters of a segment being uploaded (a durable put, a flush, tombstones carried by an
eviction round) against the real S3 server (moto), its uploads held in flight by a proxy that
adds latency (tests/support/faultproxy.py)."""

from __future__ import annotations

import asyncio

from s3kv.store import layout
from tests.store.conftest import open_s3
from tests.store.helpers import open_store
from tests.support.faultproxy import FaultProxy
from tests.support.s3server import MotoServer


async def test_a_cancelled_waiter_leaves_the_segment_alone(s3_server: MotoServer,
                                                          bucket: str) -> None:
    """Waiters of a segment (a durable put whose client went away, a flush, tombstones carried
    by an eviction round that shutdown stops) may be cancelled; the segment they waited for is
    still sealed, and neither fails the next flush nor counts its blocks lost. Awaiting the
    segment's future directly cancelled it with the waiter: found by a two-gateway soak on
    Ceph RGW, where a SIGTERM's close reported a carrier of 39 tombstones lost. The uploads are
    held in flight by a proxy adding latency in front of the real server."""
    with FaultProxy("127.0.0.1", int(s3_server.endpoint.rsplit(":", 1)[1])) as proxy:
        proxy.set(latency=0.3)
        backend = await open_s3(proxy.endpoint, bucket)
        store = await open_store(backend, seal_after=30)
        try:
            await store.create_namespace("kvns")
            waiters = [asyncio.create_task(store.put("kvns", b"d", b"durable", durable=True)),
                       asyncio.create_task(store.flush()),
                       asyncio.create_task(store.writer.write_entries(
                           [layout.tombstone_for("kvns", b"gone", 1.0)]))]
            await asyncio.sleep(0.05)  # each is waiting for its segment now
            for task in waiters:
                task.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
            assert store.writer.open_segments == 2  # both still uploading
            await store.flush()  # raised BackendUnavailable: "2 segment(s) failed"
            assert store.stats.segments_failed == 0 and store.stats.blocks_lost == 0
            assert store.stats.segments_sealed == 2  # the block's and the tombstone's
            assert await store.get("kvns", b"d") == b"durable"
        finally:
            await store.close()
            await backend.close()
