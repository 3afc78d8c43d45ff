"""Restores while the production S3 server is down or hung: radosgw stopped (refusing) or
paused (SIGSTOP: accepting and never answering) under a running gateway, then back. A real
gateway process on Ceph RGW (``pytest --rgw``), the real native client over HTTP."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

from s3kv.client import S3KVClient
from tests.gateway.conftest import TOKEN, running_gateway
from tests.support.gateway import backend_store, store_stats
from tests.support.rgw import RGWCluster

pytestmark = pytest.mark.rgw
MiB = 1024 * 1024
ARGS = ["--segment-size", "10MiB", "--part-size", "5MiB", "--max-block-size", "5MiB",
        "--seal-after", "0.5", "--sync-interval", "0", "--dram-cache", "0"]


def test_restores_while_radosgw_is_down_miss_and_lose_nothing(rgw_server: RGWCluster) -> None:
    """With radosgw stopped, a batch get of sealed blocks answers misses within seconds (no
    error into the client, no hang: an engine recomputes a missed prefix sooner than it waits
    out an outage; reads do not ride it out as uploads do) and a prefix lookup still answers
    from the index; once radosgw is back every block reads whole again: reads that failed on a
    down server drop nothing from the index."""
    blocks = {f"chain/{i:03d}": os.urandom(MiB + i) for i in range(24)}
    keys = list(blocks)
    ns = f"r-{uuid.uuid4().hex[:8]}"

    async def write(endpoint: str) -> None:
        async with S3KVClient(endpoint, token=TOKEN) as kv:
            await kv.create_namespace(ns)
            assert await kv.put_many(ns, blocks) == len(blocks)
            await kv.flush()

    async def restore(endpoint: str) -> tuple[list[bytes | None], int, float]:
        t0 = time.monotonic()
        async with S3KVClient(endpoint, token=TOKEN, timeout=60) as kv:
            got = await kv.get_many(ns, keys)
            present = await kv.lookup_prefix(ns, keys)
        return got, present, time.monotonic() - t0

    with running_gateway(backend_store(rgw_server), ARGS) as gw:
        asyncio.run(write(gw.endpoint))
        rgw_server.stop_gateway()
        try:
            got, present, took = asyncio.run(restore(gw.endpoint))
        finally:
            rgw_server.start_gateway()
        assert got == [None] * len(keys)  # misses: the server is down
        assert present == len(keys)  # the index still holds every block
        assert took < 5, took  # ~1 s here; riding the outage out, as uploads do: 10 s
        assert store_stats(gw.endpoint)["index_entries"] == len(keys)
        got, present, _ = asyncio.run(restore(gw.endpoint))
        lost = [k for k, b in zip(keys, got, strict=True) if b != blocks[k]]
        assert not lost, f"{len(lost)} of {len(keys)} blocks lost after the outage"


def test_restores_while_radosgw_hangs_miss_within_the_read_stall(rgw_server: RGWCluster) -> None:
    """radosgw paused: every connection is accepted and never answered. A restore answers
    misses once its reads have gone ``--read-stall`` (2 s here) without a byte, not after
    ``--backend-timeout`` (30 s, the default kept here: ~30 s without the stall guard); once
    radosgw goes on, every block reads whole."""
    blocks = {f"hang/{i:03d}": os.urandom(MiB + i) for i in range(16)}
    keys = list(blocks)
    ns = f"h-{uuid.uuid4().hex[:8]}"

    async def write(endpoint: str) -> None:
        async with S3KVClient(endpoint, token=TOKEN) as kv:
            await kv.create_namespace(ns)
            assert await kv.put_many(ns, blocks) == len(blocks)
            await kv.flush()

    async def restore(endpoint: str) -> tuple[list[bytes | None], float]:
        t0 = time.monotonic()
        async with S3KVClient(endpoint, token=TOKEN, timeout=60) as kv:
            got = await kv.get_many(ns, keys)
        return got, time.monotonic() - t0

    with running_gateway(backend_store(rgw_server), [*ARGS, "--read-stall", "2"]) as gw:
        asyncio.run(write(gw.endpoint))
        rgw_server.pause_gateway()
        try:
            got, took = asyncio.run(restore(gw.endpoint))
        finally:
            rgw_server.resume_gateway()
        assert got == [None] * len(keys)
        assert took < 10, took  # 2 s of stall, detected within half of that, per read wave
        got, _ = asyncio.run(restore(gw.endpoint))
        lost = [k for k, b in zip(keys, got, strict=True) if b != blocks[k]]
        assert not lost, f"{len(lost)} of {len(keys)} blocks lost after the pause"
