"""The store side of benchmarks/packing.py: a BlockStore on the benchmark's server, its timed
PUT and GET runs (write-back PUTs end with a flush), and its untimed warm-up."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.common import run_concurrently
from benchmarks.packing_runs import Profile, block_key
from benchmarks.servers import BenchServer
from s3kv.backends import S3Backend, S3Location
from s3kv.config import Settings
from s3kv.errors import Backpressure
from s3kv.sizes import MiB
from s3kv.store.store import BlockStore

NAMESPACE = "bench"


def store_settings(profile: Profile) -> Settings:
    return Settings.load({
        "segment_size": profile.segment_size, "part_size": profile.part_size,
        "max_block_size": min(64 * MiB, profile.segment_size // 2),
        "sync_interval": 0, "node_id": "bench", "log_level": "warning",
    }, env={})


async def open_store(server: BenchServer, bucket: str, prefix: str,
                     settings: Settings) -> BlockStore:
    backend = await S3Backend(S3Location(bucket, prefix, (server.url,)),
                              timeout=settings.backend_timeout).open()
    store = await BlockStore.open(settings, backend=backend, prefix=prefix)
    await store.create_namespace(NAMESPACE, "none")  # measure packing, not a codec
    # open the backend's connections before anything is timed, as for the direct client
    await asyncio.gather(*(backend.check() for _ in range(8)))
    return store


async def close_store(store: BlockStore) -> None:
    await store.close()
    await store.backend.close()


@dataclass
class StoreCounters:
    backpressure_retries: int = 0


async def store_put_all(store: BlockStore, keys: Sequence[bytes], blocks: Sequence[bytes],
                        concurrency: int, counters: StoreCounters) -> float:
    async def op(i: int) -> None:
        while True:
            try:
                await store.put(NAMESPACE, keys[i], blocks[i])
                return
            except Backpressure:  # what a gateway client sees as 503 SlowDown: retry soon
                counters.backpressure_retries += 1
                await asyncio.sleep(0.02)

    t0 = time.perf_counter()
    await run_concurrently(len(keys), concurrency, op)
    await store.flush()  # honest: every byte on the server before the clock stops
    return time.perf_counter() - t0


async def store_get_all(store: BlockStore, keys: Sequence[bytes], size: int,
                        concurrency: int) -> float:
    async def op(i: int) -> None:
        data = await store.get(NAMESPACE, keys[i])
        if data is None or len(data) != size:
            raise RuntimeError(f"store GET {keys[i]!r}: miss or wrong size")

    t0 = time.perf_counter()
    await run_concurrently(len(keys), concurrency, op)
    return time.perf_counter() - t0


async def warm_store(store: BlockStore, profile: Profile, blocks: Sequence[bytes],
                     counters: StoreCounters) -> None:
    """Untimed, once per fresh store: as many blocks as fill its open segments, flushed. A
    store that has been running holds its part buffers (s3kv/store/buffers.py), as the direct
    side holds warm connections; a fresh one zero-fills and faults in 64 MiB of them per
    segment inside the timed run otherwise."""
    segs = store.settings.max_open_segments
    n = min(len(blocks), max(1, segs * profile.segment_size // max(1, len(blocks[0]))))
    keys = [block_key("warm", i) for i in range(n)]
    await store_put_all(store, keys, blocks[:n], 8, counters)
