"""The benchmarks' shared harness: server, topology, the gateway process, CPU per process,
server-side counters, repeats and medians. Every script in benchmarks/ answers one question
with these parts:

- servers: :func:`add_arguments` gives ``--server`` (rgw by default, s3rver, moto),
  ``--endpoint``, ``--node-dir``, ``--data-dir`` and ``--split-cores``; :func:`server_from_args`
  starts the server (``benchmarks.servers``);
- topology (``benchmarks.topology``): :func:`apply_topology` with ``--split-cores`` pins every
  process of the S3 server to its share of the CPUs, the storage node, and this process with
  everything it starts afterwards to the rest, the inference node. Without it everything shares
  every CPU;
- the two sides: :func:`gateway_process` runs ``s3kv serve`` on a store of the server (or,
  without one, on a ``file://`` store; :func:`gateway_subprocess` also gives its pid);
- CPU accounting: :class:`CPUMeter` samples user+system CPU-seconds of named process groups
  (``client``, ``gateway``, and each server process: ``rgw``, ``osd``, ``mon``) and
  :meth:`CPUMeter.delta` turns two samples into CPU-seconds per group and their server sum,
  and (``benchmarks.cores``) the whole machine's per CPU, its interrupts, and what ran
  outside the named processes;
- server counters: :func:`server_counters` reads RGW's own request and byte counters (None on
  servers without them), so both sides are counted the same way, where the server sees them;
- the two sides: :class:`S3Side` (one S3 endpoint, the gateway's front or the server itself,
  and a bucket: timed PUT and GET phases, a cost sample around each PUT phase),
  :func:`run_concurrently`, :func:`payloads`, :class:`Progress`;
- repeats: :func:`medians` takes each numeric figure's median over repeated rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from benchmarks import cores
from benchmarks.s3_clients import BlockClient, SlowDown
from benchmarks.servers import (
    BenchServer,
    ServerError,
    add_server_arguments,
    bench_server,
    free_port,
    server_from_args,
    settle_disk,
)
from benchmarks.topology import Topology, apply_topology
from benchmarks.topology import add_arguments as add_topology_arguments
from tests.support.procgroup import exit_on_sigterm
from tests.support.rgw import RGWError, bucket_objects, rgw_counters

__all__ = ["BenchServer", "CPUMeter", "Gateway", "Progress", "S3Side", "ServerError", "Topology",
           "add_arguments", "add_server_arguments", "apply_topology", "bench_server",
           "bucket_objects_on", "free_port", "gateway_pid", "gateway_process",
           "gateway_subprocess", "medians",
           "mib_s", "payloads", "per_gib", "run_concurrently", "server_counters",
           "server_from_args", "settle_disk"]

ROOT = Path(__file__).resolve().parent.parent
GiB = 1 << 30
#: the daemons of RGWCluster by the order of BenchServer.pids
RGW_NAMES = ("mon", "osd", "rgw")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server flags (``benchmarks.servers``), ``--split-cores`` and ``--server-cpus``."""
    add_server_arguments(parser)
    add_topology_arguments(parser)


# ---- CPU per process -----------------------------------------------------------------------
def server_process_names(server: BenchServer) -> dict[str, int]:
    """Name -> pid of the server's processes (``rgw``/``osd``/``mon``, or ``server``)."""
    if server.kind == "rgw" and len(server.pids) == len(RGW_NAMES):
        return dict(zip(RGW_NAMES, server.pids, strict=True))
    return {"server": server.pids[0]} if server.pids else {}


@dataclass
class CPUMeter:
    """CPU-seconds (user + system, all threads) of named processes; ``server`` names which of
    them are the S3 server's, whose sum is reported as ``server``. With ``machine``, also the
    whole machine's (``benchmarks.cores``: ``machine``, ``interrupts``, ``steal``, each CPU's
    ``cpu{i}``) and ``other``, the busy CPU-seconds outside the named processes."""

    procs: dict[str, int] = field(default_factory=dict)
    server: tuple[str, ...] = ()
    machine: bool = False

    @classmethod
    def for_run(cls, server: BenchServer, **others: int) -> CPUMeter:
        names = server_process_names(server)
        return cls({"client": os.getpid(), **others, **names}, tuple(names), machine=True)

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = cores.sample() if self.machine else {}
        for name, pid in self.procs.items():
            try:
                t = psutil.Process(pid).cpu_times()
                out[name] = t.user + t.system
            except psutil.Error:
                out[name] = 0.0
        return out

    def delta(self, before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
        d = cores.between(before, after)
        d["server"] = sum(d[k] for k in self.server)
        if self.machine and "machine" in d:
            d["other"] = cores.outside(d, (k for k in self.procs if k in d))
        return d


def per_gib(values: Mapping[str, float], nbytes: int) -> dict[str, float]:
    return {k: round(v * GiB / nbytes, 3) for k, v in values.items()} if nbytes else {}


def gateway_pid() -> int:
    """The ``s3kv serve`` child of this process (the gateway the benchmark started)."""
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if "s3kv.cli" in child.cmdline() and "serve" in child.cmdline():
                return int(child.pid)
    raise ServerError("no s3kv serve child process found")


# ---- server-side counters ------------------------------------------------------------------
def server_counters(server: BenchServer) -> dict[str, int] | None:
    """RGW's request/byte counters; None for servers that keep none (moto, s3rver)."""
    if server.kind != "rgw" or server.data_dir is None:
        return None
    try:
        return rgw_counters(server.data_dir)
    except RGWError as exc:
        raise ServerError(str(exc)) from exc


def bucket_objects_on(server: BenchServer, bucket: str) -> tuple[int, int] | None:
    """(objects, bytes) in ``bucket`` as the server's bucket index counts them (RGW only)."""
    if server.kind != "rgw" or server.data_dir is None:
        return None
    return bucket_objects(server.data_dir, bucket)


# ---- the two sides: operations, payloads, progress ---------------------------------------------
async def run_concurrently(n: int, concurrency: int,
                           op: Callable[[int], Awaitable[None]]) -> None:
    """op(0..n-1), ``concurrency`` at a time, each worker taking the next index."""
    it = iter(range(n))

    async def worker() -> None:
        for i in it:
            await op(i)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


class Progress:
    """Progress lines on stderr (off for ``--json``); ``stamped`` prefixes the seconds since
    start."""

    def __init__(self, enabled: bool, *, stamped: bool = False) -> None:
        self.enabled = enabled
        self.stamped = stamped
        self.started = time.monotonic()

    def __call__(self, msg: str) -> None:
        if self.enabled:
            stamp = f"[{time.monotonic() - self.started:6.1f}s] " if self.stamped else ""
            print(f"{stamp}{msg}", file=sys.stderr, flush=True)


def payloads(n: int, size: int) -> list[bytes]:
    """``n`` distinct blocks of ``size`` bytes, cut from one random buffer (cheap to make)."""
    pool = os.urandom(max(size + n * 4099, 8 << 20))
    return [pool[i * 4099:i * 4099 + size] for i in range(n)]


def mib_s(nbytes: int, seconds: float) -> float:
    return nbytes / (1 << 20) / seconds if seconds > 0 else 0.0


# ---- phases --------------------------------------------------------------------------------
class S3Side:
    """One S3 endpoint (the gateway's front, or the server directly) and a bucket on it,
    through a :class:`~benchmarks.s3_clients.BlockClient` (aiobotocore's or warp's)."""

    def __init__(self, name: str, client: BlockClient, bucket: str,
                 flush: Callable[[], Awaitable[None]] | None = None) -> None:
        self.name = name
        self.client = client
        self.bucket = bucket
        self.flush = flush
        self.slowdowns = 0  # 503 SlowDown answers retried during PUT phases
        #: set by the benchmark: a cost sample (CPU per process, server counters) taken just
        #: before and just after each timed PUT phase (flush included), kept in ``last_put``,
        #: and each GET phase (``last_get``)
        self.sample: Callable[[], dict[str, Any]] | None = None
        self.last_put: tuple[dict[str, Any], dict[str, Any]] | None = None
        self.last_get: tuple[dict[str, Any], dict[str, Any]] | None = None  # the same, GETs
        #: the warm-up's keys and blocks, read again (untimed) to settle the server
        self.warm: tuple[list[str], list[bytes]] = ([], [])

    async def put_all(self, keys: Sequence[str], blocks: Sequence[bytes],
                      concurrency: int) -> float:
        async def op(i: int) -> None:
            while True:  # 503 SlowDown is retried after Retry-After, as S3 clients do
                try:
                    await self.client.put(self.bucket, keys[i], blocks[i])
                    return
                except SlowDown as exc:
                    self.slowdowns += 1
                    await asyncio.sleep(exc.retry_after)

        await settle_disk()
        before = self.sample() if self.sample is not None else {}
        t0 = time.perf_counter()
        await run_concurrently(len(keys), concurrency, op)
        if self.flush is not None:
            await self.flush()
        elapsed = time.perf_counter() - t0
        if self.sample is not None:
            self.last_put = (before, self.sample())
        return elapsed

    async def get_all(self, keys: Sequence[str], blocks: Sequence[bytes],
                      concurrency: int) -> float:
        bad: list[str] = []

        async def op(i: int) -> None:
            if await self.client.get(self.bucket, keys[i]) != blocks[i]:
                bad.append(keys[i])

        await settle_disk()
        before = self.sample() if self.sample is not None else {}
        t0 = time.perf_counter()
        await run_concurrently(len(keys), concurrency, op)
        elapsed = time.perf_counter() - t0
        if self.sample is not None:
            self.last_get = (before, self.sample())
        if bad:
            raise RuntimeError(f"{self.name}: {len(bad)} blocks read back wrong, e.g. {bad[0]}")
        return elapsed


# ---- repeats -------------------------------------------------------------------------------
def medians(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over the rounds; other values from the first round."""
    out: dict[str, Any] = {}
    for key, first in rounds[0].items():
        values = [r[key] for r in rounds if key in r]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = statistics.median(values)
        else:
            out[key] = first
    return out


# ---- the gateway side ----------------------------------------------------------------------
@dataclass(frozen=True)
class Gateway:
    """A running ``s3kv serve`` subprocess: its URL and pid."""

    url: str
    pid: int


@contextlib.contextmanager
def gateway_subprocess(server: BenchServer | None, store: str, args: Sequence[str], *,
                       access: str | None, secret: str | None, ready_path: str = "/readyz",
                       timeout: float = 60.0) -> Iterator[Gateway]:
    """A ``s3kv serve`` subprocess on ``store`` with ``args``: an ``s3://`` URL on ``server``,
    or (``server`` None) any store needing no S3 server, e.g. ``file:///dev/shm/...``. With
    ``access`` and ``secret`` None it runs anonymous (the front checks no signature). Yields
    it once ready and stops it (SIGTERM, then SIGKILL) afterwards; its log is kept only when
    something failed."""
    exit_on_sigterm()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("S3KV_ACCESS_KEY", "S3KV_SECRET_KEY")}
    if server is not None:
        env.update(server.env())
    if access is not None and secret is not None:
        env["S3KV_ACCESS_KEY"] = access
        env["S3KV_SECRET_KEY"] = secret
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    argv = [sys.executable, "-m", "s3kv.cli", "serve", "--listen", f"127.0.0.1:{port}",
            "--store", store, *args]
    log = tempfile.NamedTemporaryFile(prefix="bench-gateway-", suffix=".log",  # noqa: SIM115
                                      delete=False)
    # cwd: `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    ok = False
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise ServerError(f"gateway exited at start; see {log.name}:\n"
                                  f"{Path(log.name).read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url + ready_path, timeout=1):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise ServerError(f"gateway not ready in {timeout:.0f} s; see "
                                      f"{log.name}") from None
                time.sleep(0.1)
        yield Gateway(url, proc.pid)
        ok = True
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if ok:
            os.unlink(log.name)
        else:
            print(f"gateway log: {log.name}", file=sys.stderr)


@contextlib.contextmanager
def gateway_process(server: BenchServer | None, store: str, args: Sequence[str], *,
                    access: str | None, secret: str | None, ready_path: str = "/readyz",
                    timeout: float = 60.0) -> Iterator[str]:
    """:func:`gateway_subprocess`, yielding only its URL."""
    with gateway_subprocess(server, store, args, access=access, secret=secret,
                            ready_path=ready_path, timeout=timeout) as gw:
        yield gw.url
