"""The parts of benchmarks/packing.py: runs and comparisons, the direct (one object per block)
side, the store side (a BlockStore on the benchmark's server, its timed PUT and GET runs and
untimed warm-up). The index memory measurement and the report: benchmarks/packing_report.py."""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiobotocore.session import get_session

from benchmarks.harness import BenchServer, run_concurrently, settle_disk
from s3kv.backends import S3Backend, S3Location
from s3kv.config import Settings
from s3kv.errors import Backpressure
from s3kv.sizes import KiB, MiB, format_size
from s3kv.store.store import BlockStore


@dataclass(frozen=True)
class Profile:
    volume: int  # block bytes per timed PUT run (per block size and concurrency)
    segment_size: int
    part_size: int
    chains: int
    chain_length: int
    index_entries: int
    concurrency: tuple[int, ...] = (1, 8)
    block_sizes: tuple[int, ...] = (256 * KiB, 2 * MiB)
    warm_requests: int = 1024  # untimed PUT+GET pairs that warm the server first
    chain_block: int = 256 * KiB


FULL = Profile(volume=256 * MiB, segment_size=64 * MiB, part_size=16 * MiB, chains=8,
               chain_length=64, index_entries=1_000_000)
# Small enough for moto in CI (< 40 s): moto wants parts >= 5 MiB and reads a whole object
# per ranged GET, so segments stay small.
QUICK = Profile(volume=4 * MiB, segment_size=10 * MiB, part_size=5 * MiB, chains=2,
                chain_length=16, index_entries=20_000, warm_requests=16)


def _proc_cpu(pids: Sequence[int]) -> float | None:
    """CPU seconds (user + system) of the server's processes summed (RGW: radosgw, OSD, mon),
    from /proc; None where unavailable."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields_ = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields_[11]) + int(fields_[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None
    return total


@dataclass
class Run:
    """One timed run: bytes moved in seconds at a concurrency, and the CPU it cost."""

    what: str
    concurrency: int
    nbytes: int
    seconds: float
    client_cpu: float = 0.0  # this process, all threads
    server_cpu: float | None = None  # the S3 server's processes (None: external endpoint)

    @property
    def mib_s(self) -> float:
        return self.nbytes / MiB / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        gib = self.nbytes / (1024 * MiB)
        return {"mib_s": round(self.mib_s, 2), "seconds": round(self.seconds, 3),
                "client_cpu_s_per_gib": round(self.client_cpu / gib, 2) if gib else None,
                "server_cpu_s_per_gib": (round(self.server_cpu / gib, 2)
                                         if gib and self.server_cpu is not None else None)}


async def timed(what: str, concurrency: int, nbytes: int, server_pids: Sequence[int],
                fn: Callable[[], Awaitable[object]]) -> Run:
    await settle_disk()
    s0 = _proc_cpu(server_pids) if server_pids else None
    c0 = time.process_time()
    t0 = time.perf_counter()
    await fn()
    secs = time.perf_counter() - t0
    c1 = time.process_time()
    s1 = _proc_cpu(server_pids) if server_pids else None
    scpu = s1 - s0 if s0 is not None and s1 is not None else None
    return Run(what, concurrency, nbytes, secs, c1 - c0, scpu)


@dataclass
class Comparison:
    """Store against direct in one repeat: the better concurrency counts on each side."""

    name: str
    store: list[Run] = field(default_factory=list)
    direct: list[Run] = field(default_factory=list)

    @staticmethod
    def best(runs: list[Run]) -> Run:
        return max(runs, key=lambda r: r.mib_s)

    @property
    def ratio(self) -> float:
        d = self.best(self.direct).mib_s
        return self.best(self.store).mib_s / d if d else math.inf

    def as_dict(self) -> dict[str, Any]:
        bs, bd = self.best(self.store), self.best(self.direct)
        return {
            "store_mib_s": round(bs.mib_s, 2), "store_best_concurrency": bs.concurrency,
            "direct_mib_s": round(bd.mib_s, 2), "direct_best_concurrency": bd.concurrency,
            "ratio": round(self.ratio, 3),
            "runs": {f"{r.what}_c{r.concurrency}": r.as_dict() for r in self.store + self.direct},
        }


def summarize(series: list[Comparison]) -> dict[str, Any]:
    """Median over repeats (the ratio of each repeat, then the median of those)."""
    return {
        "ratio": statistics.median(c.ratio for c in series),
        "store_mib_s": round(statistics.median(c.best(c.store).mib_s for c in series), 2),
        "direct_mib_s": round(statistics.median(c.best(c.direct).mib_s for c in series), 2),
        "store_best_concurrency": [c.best(c.store).concurrency for c in series],
        "direct_best_concurrency": [c.best(c.direct).concurrency for c in series],
        "ratios": [round(c.ratio, 3) for c in series],
        "repeats": [c.as_dict() for c in series],
    }


def size_label(n: int) -> str:
    return format_size(n).replace(" ", "")


def payloads(n: int, size: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.bytes(size) for _ in range(n)]


def block_key(tag: str, i: int) -> bytes:
    """64-byte keys, like the prefix-chain hashes clients use (hex of a 256-bit digest)."""
    return uuid.uuid5(uuid.NAMESPACE_OID, f"{tag}/{i}").hex.encode() * 2


# ---- the direct baseline: one object per block, aiobotocore, the store's own Config ------------
class Direct:
    def __init__(self, server: BenchServer, bucket: str) -> None:
        self.server = server
        self.bucket = bucket
        # identical botocore settings (pool, timeouts, no payload signing/checksums, path style)
        self.config = S3Backend(S3Location(bucket, "", (server.url,)))._config
        self._cm: Any = None
        self.client: Any = None

    async def __aenter__(self) -> Direct:
        self._cm = get_session().create_client(
            "s3", endpoint_url=self.server.url, region_name=self.server.region,
            config=self.config)
        self.client = await self._cm.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._cm.__aexit__(None, None, None)

    async def put(self, key: str, data: bytes) -> None:
        await self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    async def get(self, key: str) -> int:
        resp = await self.client.get_object(Bucket=self.bucket, Key=key)
        async with resp["Body"] as body:
            data: bytes = await body.read()
        return len(data)

    async def warm(self, concurrency: int, requests: int) -> None:
        """Before anything is timed: open the pool's connections, and run the server's request
        paths until they are warm (s3rver is JavaScript: its first thousand 256 KiB PUTs ran
        at 32 MiB/s, later ones at 45, so a cold server flattered whichever side came second).
        """
        block = os.urandom(256 * KiB)

        async def op(i: int) -> None:
            await self.put(f"warm/{i}", block)
            await self.get(f"warm/{i}")

        await run_concurrently(requests, concurrency, op)

    async def put_all(self, prefix: str, blocks: Sequence[bytes], concurrency: int) -> float:
        async def op(i: int) -> None:
            await self.put(f"{prefix}/{i}", blocks[i])

        t0 = time.perf_counter()
        await run_concurrently(len(blocks), concurrency, op)
        return time.perf_counter() - t0

    async def get_all(self, keys: Sequence[str], size: int, concurrency: int) -> float:
        async def op(i: int) -> None:
            n = await self.get(keys[i])
            if n != size:
                raise RuntimeError(f"direct GET {keys[i]}: {n} bytes, expected {size}")

        t0 = time.perf_counter()
        await run_concurrently(len(keys), concurrency, op)
        return time.perf_counter() - t0

    async def delete_prefix(self, prefix: str) -> None:
        paginator = self.client.get_paginator("list_objects_v2")
        keys: list[str] = []
        async for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            keys.extend(item["Key"] for item in page.get("Contents", []))
        for i in range(0, len(keys), 1000):
            await self.client.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})


# ---- the store side -------------------------------------------------------------------------


# ---- the store side --------------------------------------------------------------------------
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
