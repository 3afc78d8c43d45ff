"""S3 client load for the reliability suite: real S3 clients (aiobotocore) against the gateway.

- ``Ledger``: every block a test tried to write (key -> digest, size, durable, acknowledged);
  verifying a read against it counts wrong bytes, which must stay 0.
- ``GatewayClients``: one aiobotocore client per task, signing with the gateway's credentials;
  durable PUTs carry ``x-s3kv-durability: sealed`` (a second client with a header hook).
- ``put_block`` / ``get_block``: one PUT or GET with its outcome classified (ok, slowdown,
  unavailable, connection error, miss), never raising for what a fault may legitimately cause.
- ``RssSampler``: VmRSS of a process sampled in a thread over time (peak, early and late phase).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiobotocore.session import get_session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tests.support.gateway import GW_ACCESS, GW_SECRET, TOKEN
from tests.support.s3server import REGION

MiB = 1024 * 1024
#: S3 error codes a fault may legitimately cause on a PUT (the client retries later)
RETRYABLE = {"SlowDown", "ServiceUnavailable", "RequestTimeout", "InternalError"}


@dataclass
class Block:
    digest: bytes
    size: int
    durable: bool
    acked: bool = False


@dataclass
class Ledger:
    """What was written, and what every read returned."""

    blocks: dict[str, Block] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)  # keys whose read returned other bytes
    durable_lost: list[str] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return self.counts["put"] + self.counts["get"]

    def check_read(self, key: str, data: bytes | None, *, after_crash: bool) -> None:
        """A read of ``key``: exact, or a miss where a miss is allowed; never other bytes.

        Before a crash, an acknowledged block must read back (the gateway serves it from memory
        or the backend; only a backend fault may turn it into a miss, which the caller says by
        passing ``after_crash=True``). After a crash, durable blocks must read back."""
        blk = self.blocks[key]
        if data is None:
            self.counts["miss"] += 1
            if blk.acked and blk.durable:
                self.durable_lost.append(key)
            return
        if len(data) != blk.size or hashlib.sha256(data).digest() != blk.digest:
            self.wrong.append(key)
            return
        self.counts["exact"] += 1


def payload(size: int) -> bytes:
    return os.urandom(size)


def gateway_config(**extra: Any) -> Config:
    return Config(signature_version="s3v4", retries={"max_attempts": 1},
                  s3={"addressing_style": "path"}, connect_timeout=3, read_timeout=60,
                  request_checksum_calculation="when_required",
                  response_checksum_validation="when_required", **extra)


_SESSIONS: list[Any] = []


def _session() -> Any:
    """One botocore session for the process: it caches the loaded service models, which makes
    creating a client ~10x cheaper than with a fresh session."""
    if not _SESSIONS:
        _SESSIONS.append(get_session())
    return _SESSIONS[0]


class GatewayClients:
    """A write-back and a durable aiobotocore S3 client for one task."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._stack = contextlib.AsyncExitStack()
        self.plain: Any = None
        self.durable: Any = None

    async def __aenter__(self) -> GatewayClients:
        session = _session()
        for name in ("plain", "durable"):
            client = await self._stack.enter_async_context(session.create_client(
                "s3", endpoint_url=self.endpoint, region_name=REGION,
                aws_access_key_id=GW_ACCESS, aws_secret_access_key=GW_SECRET,
                config=gateway_config(max_pool_connections=4)))
            setattr(self, name, client)

        def sealed(request: Any, **_: Any) -> None:
            request.headers["x-s3kv-durability"] = "sealed"

        self.durable.meta.events.register("before-sign.s3.PutObject", sealed)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.aclose()


def classify(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code == "SlowDown":
            return "slowdown"
        if code in RETRYABLE or status == 503:
            return "unavailable"
        return f"error:{code or status}"
    if isinstance(exc, (BotoCoreError, aiohttp.ClientError, OSError, asyncio.TimeoutError)):
        return "conn"
    return f"error:{type(exc).__name__}"


async def put_block(clients: GatewayClients, ledger: Ledger, bucket: str, key: str, size: int,
                    durable: bool) -> str:
    """PUT a fresh block under a fresh key; returns the outcome ("ok", "slowdown", ...)."""
    data = payload(size)
    ledger.blocks[key] = Block(hashlib.sha256(data).digest(), size, durable)
    ledger.counts["put"] += 1
    client = clients.durable if durable else clients.plain
    try:
        await client.put_object(Bucket=bucket, Key=key, Body=data)
    except Exception as exc:  # classified: faults may cause these
        outcome = classify(exc)
    else:
        ledger.blocks[key].acked = True
        outcome = "ok"
    ledger.counts[f"put_{outcome}"] += 1
    return outcome


async def get_block(client: Any, ledger: Ledger, bucket: str, key: str) -> tuple[str,
                                                                                bytes | None]:
    """GET a block: ("ok", bytes), ("miss", None) or (outcome, None) for a refused request."""
    ledger.counts["get"] += 1
    try:
        resp = await client.get_object(Bucket=bucket, Key=key)
        async with resp["Body"] as body:
            data: bytes = await body.read()
    except Exception as exc:
        if isinstance(exc, ClientError) and exc.response.get("Error", {}).get(
                "Code") in ("NoSuchKey", "404"):
            ledger.counts["get_miss"] += 1
            return "miss", None
        outcome = classify(exc)
        ledger.counts[f"get_{outcome}"] += 1
        return outcome, None
    ledger.counts["get_ok"] += 1
    return "ok", data


@contextlib.asynccontextmanager
async def clients_for(endpoint: str) -> AsyncIterator[GatewayClients]:
    async with GatewayClients(endpoint) as c:
        yield c


def random_size(rnd: random.Random, small: int = 4096, large: int = 1536 * 1024) -> int:
    """Mostly small blocks, some large, some unaligned."""
    r = rnd.random()
    if r < 0.5:
        return rnd.randint(small, 256 * 1024)
    if r < 0.9:
        return rnd.randint(256 * 1024, large)
    return rnd.choice([1, 4095, 4097, large])


# ---- the gateway's own view ------------------------------------------------------------------

def http_status(url: str, timeout: float = 10.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def timed_status(url: str, timeout: float = 30.0) -> tuple[int, float]:
    """(HTTP status, seconds the server took), measured by curl in its own process when there
    is one, so that this process's own load (its GIL) does not count as the server's latency."""
    curl = shutil.which("curl")
    if curl is None:
        t0 = time.monotonic()
        return http_status(url, timeout), time.monotonic() - t0
    out = subprocess.run([curl, "-s", "-o", "/dev/null", "-m", str(timeout), "-w",
                          "%{http_code} %{time_total}", url], capture_output=True, text=True,
                         check=False).stdout.split()
    return (int(out[0]), float(out[1])) if len(out) == 2 else (0, timeout)


def v1(endpoint: str, path: str, method: str = "GET", timeout: float = 60.0) -> dict[str, Any]:
    req = urllib.request.Request(endpoint + path, method=method, data=b"" if method == "POST"
                                 else None, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    return dict(json.loads(body)) if body else {}


def stats(endpoint: str) -> dict[str, Any]:
    return v1(endpoint, "/v1/stats")


def flush(endpoint: str) -> None:
    v1(endpoint, "/v1/flush", "POST")


def wait_until(cond: Any, timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return bool(cond())


class RssSampler:
    """Samples VmRSS of ``pid_of()`` every ``period`` seconds in a thread (0 while it is dead)."""

    def __init__(self, pid_of: Any, period: float = 0.25) -> None:
        self.pid_of = pid_of
        self.period = period
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            rss = 0
            with contextlib.suppress(Exception):
                pid = self.pid_of()
                with open(f"/proc/{pid}/status") as fh:
                    for line in fh:
                        if line.startswith("VmRSS:"):
                            rss = int(line.split()[1]) * 1024
            if rss:
                self.samples.append((time.monotonic() - t0, rss))
            self._stop.wait(self.period)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    @property
    def peak_mib(self) -> float:
        return max((r for _, r in self.samples), default=0) / MiB

    def phase_max_mib(self, start: float, end: float) -> float:
        """Max RSS (MiB) between fractions ``start`` and ``end`` of the sampled time."""
        if not self.samples:
            return 0.0
        t_end = self.samples[-1][0]
        vals = [r for t, r in self.samples if start * t_end <= t <= end * t_end]
        return max(vals, default=0) / MiB


# ---- steady load -----------------------------------------------------------------------------

@dataclass
class LoadSpec:
    tasks: int = 4
    durable_p: float = 0.3  # share of PUTs asking for x-s3kv-durability: sealed
    max_size: int = 1536 * 1024
    retry_refused: bool = False  # retry PUTs refused with 503 (as S3 clients do), counting them
    misses_allowed: bool = False  # a fault is on: an acknowledged block may read as a miss


async def run_load(endpoint: str, bucket: str, ledger: Ledger, rnd: random.Random, prefix: str,
                   spec: LoadSpec, stop: asyncio.Event, live: list[str] | None = None) -> None:
    """Writers that PUT fresh blocks and read back random acknowledged ones until ``stop``.

    ``live``: keys acknowledged during this gateway's lifetime (they must read back exactly,
    unless ``spec.misses_allowed``); new acknowledged keys are appended to it."""
    live = [] if live is None else live

    async def task(t: int) -> None:
        async with GatewayClients(endpoint) as clients:
            n = 0
            while not stop.is_set():
                n += 1
                key = f"{prefix}/{t}/{n:06d}"
                size = random_size(rnd, large=spec.max_size)
                durable = rnd.random() < spec.durable_p
                while True:
                    outcome = await put_block(clients, ledger, bucket, key, size, durable)
                    if outcome in ("slowdown", "unavailable") and spec.retry_refused \
                            and not stop.is_set():
                        ledger.counts["retried"] += 1
                        await asyncio.sleep(0.2 + rnd.random() * 0.3)
                        continue
                    break
                if outcome == "ok":
                    live.append(key)
                elif outcome == "conn" and stop.is_set():
                    return
                if live and not stop.is_set():
                    target = rnd.choice(live)
                    result, data = await get_block(clients.plain, ledger, bucket, target)
                    if result == "ok":
                        ledger.check_read(target, data, after_crash=False)
                    elif result == "miss" and not spec.misses_allowed:
                        ledger.counts["unexpected_miss"] += 1
                        ledger.wrong.append(f"{target} (acknowledged, read as a miss)")
                if outcome not in ("ok",) and not stop.is_set():
                    await asyncio.sleep(0.05)

    await asyncio.gather(*(task(t) for t in range(spec.tasks)))


async def verify_all(endpoint: str, bucket: str, ledger: Ledger, *,
                     concurrency: int = 6) -> list[str]:
    """Read every block ever written: durable ones must be exact, others exact or a miss.

    Returns the keys that read as misses. Refused reads (503) are retried for a while."""
    keys = sorted(ledger.blocks)
    misses: list[str] = []
    queue: asyncio.Queue[str] = asyncio.Queue()
    for k in keys:
        queue.put_nowait(k)

    async def worker() -> None:
        async with GatewayClients(endpoint) as clients:
            while not queue.empty():
                key = queue.get_nowait()
                for _ in range(20):
                    result, data = await get_block(clients.plain, ledger, bucket, key)
                    if result in ("ok", "miss"):
                        break
                    await asyncio.sleep(0.5)
                else:
                    raise AssertionError(f"GET {key} kept failing: {result}")
                ledger.check_read(key, data, after_crash=True)
                if data is None:
                    misses.append(key)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return misses
