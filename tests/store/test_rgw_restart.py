"""A production S3 server restarting under a write stream: radosgw stopped and started again
3 s later (its data kept, as in a rolling upgrade) while the store takes blocks. Real parts
only: Ceph RGW on loopback (``pytest --rgw``)."""

from __future__ import annotations

import asyncio
import time

import pytest

from s3kv.errors import BackendError, Backpressure
from s3kv.sizes import KiB, MiB
from s3kv.store.store import BlockStore
from tests.store.conftest import open_s3
from tests.store.helpers import block, open_store
from tests.support.rgw import RGWCluster

pytestmark = pytest.mark.rgw


async def _write_stream(store: BlockStore, stop: asyncio.Event, acked: dict[bytes, bytes],
                        refused: list[float]) -> None:
    """What an engine does: put blocks one after another; a 503 (Backpressure) is waited out
    and the same block sent again."""
    i = 0
    while not stop.is_set():
        key, data = f"k{i:06d}".encode(), block(i, 256 * KiB)
        try:
            await store.put("kvns", key, data)
        except (Backpressure, BackendError):
            refused.append(time.monotonic())
            await asyncio.sleep(0.2)
            continue
        acked[key] = data
        i += 1
        await asyncio.sleep(0.005)


async def test_acknowledged_blocks_survive_a_radosgw_restart(rgw_server: RGWCluster) -> None:
    """Segments upload part by part (5 MiB parts of 20 MiB segments) while radosgw is down for
    3 s: their uploads ride it out (s3kv.retry.riding_out) and every block acknowledged before,
    during and after reads back whole. With four quick attempts per request (~0.7 s) three
    segments failed and 237 of 587 acknowledged blocks were lost."""
    backend = await open_s3(rgw_server.endpoint, "rgw-restart", request_timeout=10.0)
    store = await open_store(backend, segment_size=20 * MiB, part_size=5 * MiB,
                             backend_timeout=30.0, max_open_segments=3)
    acked: dict[bytes, bytes] = {}
    refused: list[float] = []
    stop = asyncio.Event()
    try:
        await store.create_namespace("kvns")
        writer = asyncio.create_task(_write_stream(store, stop, acked, refused))
        await asyncio.sleep(1.5)
        before = len(acked)
        await asyncio.to_thread(rgw_server.restart_gateway, down_for=3.0)
        after_restart = len(acked)
        await asyncio.sleep(2.0)
        stop.set()
        await writer
        await store.flush()
        lost = [k for k, v in acked.items() if await store.get("kvns", k) != v]
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged blocks lost"
        assert store.stats.segments_failed == 0
        # writes went on before and after the outage (those during it met a bounded memory)
        assert before > 0 and len(acked) > after_restart
        assert store.writer.open_segments == 0
        # no upload was left open on the server
        assert not await backend.list_multipart_uploads("")
    finally:
        stop.set()
        await store.close()
        await backend.close()
