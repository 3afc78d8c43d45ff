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


def _written(endpoint: str, prefix: str, n: int) -> tuple[str, dict[str, bytes]]:
    """A fresh namespace holding ``n`` blocks of ~1 MiB, sealed (read from RGW from then on)."""
    ns = f"r-{uuid.uuid4().hex[:8]}"
    blocks = {f"{prefix}/{i:03d}": os.urandom(MiB + i) for i in range(n)}

    async def write() -> None:
        async with S3KVClient(endpoint, token=TOKEN) as kv:
            await kv.create_namespace(ns)
            assert await kv.put_many(ns, blocks) == len(blocks)
            await kv.flush()

    asyncio.run(write())
    return ns, blocks


def _restore(endpoint: str, ns: str, keys: list[str]) -> tuple[list[bytes | None], int, float]:
    """A batch get of ``keys`` and a prefix lookup: the blocks, the prefix, the seconds."""

    async def run() -> tuple[list[bytes | None], int, float]:
        t0 = time.monotonic()
        async with S3KVClient(endpoint, token=TOKEN, timeout=60) as kv:
            got = await kv.get_many(ns, keys)
            present = await kv.lookup_prefix(ns, keys)
        return got, present, time.monotonic() - t0

    return asyncio.run(run())


def _lost(endpoint: str, ns: str, blocks: dict[str, bytes]) -> list[str]:
    got, _, _ = _restore(endpoint, ns, list(blocks))
    return [k for k, b in zip(blocks, got, strict=True) if b != blocks[k]]


@pytest.mark.parametrize("fault", ["stopped", "paused"])
def test_restores_on_a_down_or_hung_radosgw_miss_and_lose_nothing(rgw_server: RGWCluster,
                                                                 fault: str) -> None:
    """radosgw stopped (connections refused) or paused (SIGSTOP: accepted, never answered).
    A batch get of sealed blocks answers misses within seconds, no error into the client and
    no hang (an engine recomputes a missed prefix sooner than it waits out an outage):
    - stopped: at once (~0.5 s); reads do not ride an outage out as uploads do (10 s);
    - paused: once its reads have gone ``--read-stall`` (2 s here) without a byte, not after
      ``--backend-timeout`` (30 s, the default kept here: ~30 s without the stall guard).
    A prefix lookup still answers from the index, and once radosgw is back every block reads
    whole: reads that failed on a down server drop nothing from the index."""
    stopped = fault == "stopped"
    args = ARGS if stopped else [*ARGS, "--read-stall", "2"]
    with running_gateway(backend_store(rgw_server), args) as gw:
        ns, blocks = _written(gw.endpoint, fault, 24)
        keys = list(blocks)
        (rgw_server.stop_gateway if stopped else rgw_server.pause_gateway)()
        try:
            got, present, took = _restore(gw.endpoint, ns, keys)
        finally:
            (rgw_server.start_gateway if stopped else rgw_server.resume_gateway)()
        assert got == [None] * len(keys)  # misses: the server is down
        assert present == len(keys)  # the index still holds every block
        assert took < (5 if stopped else 10), took
        assert store_stats(gw.endpoint)["index_entries"] == len(keys)
        lost = _lost(gw.endpoint, ns, blocks)
        assert not lost, f"{len(lost)} of {len(keys)} blocks lost after the {fault} server"
