"""Runs, comparisons and the direct (one object per block) side of benchmarks/packing.py."""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiobotocore.session import get_session

from benchmarks.common import run_concurrently
from benchmarks.servers import (
    BenchServer,
    settle_disk,
)
from s3kv.backends import S3Backend, S3Location
from s3kv.sizes import KiB, MiB, format_size


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


def _proc_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of a process, from /proc; None where unavailable."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields_ = fh.read().rsplit(")", 1)[1].split()
        return (int(fields_[11]) + int(fields_[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class Run:
    """One timed run: bytes moved in seconds at a concurrency, and the CPU it cost."""

    what: str
    concurrency: int
    nbytes: int
    seconds: float
    client_cpu: float = 0.0  # this process, all threads
    server_cpu: float | None = None  # the S3 server process (None: external endpoint)

    @property
    def mib_s(self) -> float:
        return self.nbytes / MiB / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        gib = self.nbytes / (1024 * MiB)
        return {"mib_s": round(self.mib_s, 2), "seconds": round(self.seconds, 3),
                "client_cpu_s_per_gib": round(self.client_cpu / gib, 2) if gib else None,
                "server_cpu_s_per_gib": (round(self.server_cpu / gib, 2)
                                         if gib and self.server_cpu is not None else None)}


async def timed(what: str, concurrency: int, nbytes: int, server_pid: int | None,
                fn: Callable[[], Awaitable[object]]) -> Run:
    await settle_disk()
    s0 = _proc_cpu(server_pid) if server_pid else None
    c0 = time.process_time()
    t0 = time.perf_counter()
    await fn()
    secs = time.perf_counter() - t0
    c1 = time.process_time()
    s1 = _proc_cpu(server_pid) if server_pid else None
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


class Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.monotonic()

    def __call__(self, msg: str) -> None:
        if self.enabled:
            print(f"[{time.monotonic() - self.started:6.1f}s] {msg}", file=sys.stderr, flush=True)


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
