"""The sweep: for each client count and each op, one phase of synchronized client processes.

Every phase's clients are separate OS processes (or processes of remote ``s3kv agent``s), each
with its own connections. All of a phase's clients are launched, set up, and started together
at one wall-clock time. GET phases read one object set, uploaded once before the first of them,
so every step reads identical objects; each PUT phase's objects are removed after it (unless
``--noclear``). Ctrl-C stops the running phase cleanly: clients close their record files, the
phase is merged and analysed, and the summary covers what was measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from s3kv.clock import now_s
from s3kv.errors import ConfigError
from warp.analysis import AnalysisOptions, analyze_files
from warp.benchmarks import load
from warp.client import Job
from warp.config import BenchConfig
from warp.records import read_records, write_records
from warp.runner import delete_prefix, prepare_object_set
from warp.sweep import summary
from warp.sweep.handles import AgentClient, ClientHandle, LocalClient
from warp.sweep.plot import plot
from warp.units import format_rate

#: ops a sweep can run; these read the shared object set
SWEEP_OPS = ("put", "get", "stat", "list")
SHARED_SET_OPS = ("get", "stat", "list")


@dataclass(frozen=True)
class SweepConfig:
    template: BenchConfig  # its op and client_id are set per phase and client
    clients: tuple[int, ...]
    out: Path
    ops: tuple[str, ...] = ("put", "get")
    agents: tuple[str, ...] = ()
    agent_token: str = ""
    reference: str = ""
    trim: float = 2.0
    local_server: bool = False
    progress: bool = True
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ops:
            raise ConfigError(f"--ops names no operation: give some of {', '.join(SWEEP_OPS)}")
        bad = [op for op in self.ops if op not in SWEEP_OPS]
        if bad:
            raise ConfigError(f"sweep ops must be among {', '.join(SWEEP_OPS)}: not "
                              f"{', '.join(bad)} (use `s3kv bench` for the others)")
        if not self.clients:
            raise ConfigError("--clients names no client count")
        bucket = AnalysisOptions().bucket_s
        if self.template.duration - 2 * self.trim < bucket:
            raise ConfigError(f"--trim {self.trim:g}s at each end of a {self.template.duration:g}"
                              f" s phase leaves less than one {bucket:g} s bucket to measure: "
                              "give a longer --duration or a shorter --trim")


@dataclass
class SweepOutcome:
    phases: list[summary.PhaseResult]
    interrupted: bool
    out: Path

    @property
    def errors(self) -> int:
        return sum(p.errors for p in self.phases)


class Sweep:
    def __init__(self, cfg: SweepConfig) -> None:
        self.cfg = cfg
        self.phases: list[summary.PhaseResult] = []
        self.interrupted = asyncio.Event()
        self._pool: list[LocalClient] = []  # local client processes, reused across phases
        self.set_config = cfg.template.replace(op="get", run_id=f"{cfg.template.run_id}-set",
                                               client_id="prepare", prepared=False)

    # ---- the whole sweep ------------------------------------------------------------------
    async def run(self) -> SweepOutcome:
        cfg = self.cfg
        cfg.out.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self.interrupted.set)
        try:
            if any(op in SHARED_SET_OPS for op in cfg.ops):
                self._say(f"preparing the object set: {self.set_config.objects} x "
                          f"{self.set_config.obj_size} bytes")
                await self._interruptible(prepare_object_set(self.set_config, load("get")))
            for n in cfg.clients:
                for op in cfg.ops:
                    if self.interrupted.is_set():
                        break
                    self.phases.append(await self.phase(op, n))
                    self.write_summary()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            await asyncio.gather(*(c.close() for c in self._pool), return_exceptions=True)
            if not cfg.template.noclear and any(op in SHARED_SET_OPS for op in cfg.ops):
                await delete_prefix(self.set_config, self.set_config.run_prefix)
        self.write_summary()
        with contextlib.suppress(OSError):
            (cfg.out / "clients").rmdir()  # empty once every phase is merged
        if self.phases:
            plot(self.phases, cfg.out / "sweep.png", cfg.reference or None, self._title())
        return SweepOutcome(self.phases, self.interrupted.is_set(), cfg.out)

    async def _interruptible(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        stopper = asyncio.ensure_future(self.interrupted.wait())
        await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return
        task.result()

    # ---- one phase ------------------------------------------------------------------------
    def _handle(self, index: int) -> ClientHandle:
        label = f"c{index + 1}"
        if self.cfg.agents:
            return AgentClient(label, self.cfg.agents[index % len(self.cfg.agents)],
                               self.cfg.agent_token)
        while len(self._pool) <= index:
            self._pool.append(LocalClient(f"c{len(self._pool) + 1}"))
        return self._pool[index]

    async def phase(self, op: str, n: int) -> summary.PhaseResult:
        cfg, t = self.cfg, self.cfg.template
        phase_id = f"{op}-{n:02d}c"
        shared = op in SHARED_SET_OPS
        run_id = self.set_config.run_id if shared else f"{t.run_id}-{phase_id}"
        workdir = cfg.out / "clients"
        workdir.mkdir(exist_ok=True)
        parts = [workdir / f"{phase_id}-c{i + 1}.csv.zst" for i in range(n)]
        handles = [self._handle(i) for i in range(n)]
        comment = json.dumps({"sweep_phase": phase_id, "clients": n, **t.to_dict()}, default=str)
        jobs = [Job(t.replace(op=op, client_id=f"c{i + 1}", run_id=run_id, prepared=shared,
                              cleanup=False), str(parts[i]), comment=comment)
                for i in range(n)]
        bar = tqdm(total=round(t.duration), unit="s", file=sys.stderr, leave=True,
                   desc=f"{op.upper()} {n} client(s) x {t.concurrent}",
                   disable=None if cfg.progress else True)
        latest: dict[int, dict[str, Any]] = {}
        codes: list[int] = []
        try:
            await asyncio.gather(*(h.launch(j) for h, j in zip(handles, jobs, strict=True)))
            start_at = now_s() + (1.0 if cfg.agents else 0.25)
            await asyncio.gather(*(h.start(start_at) for h in handles))

            async def follow(i: int, h: ClientHandle) -> None:
                async for event in h.events():
                    latest[i] = event

            followers = [asyncio.ensure_future(follow(i, h)) for i, h in enumerate(handles)]
            stopper = asyncio.ensure_future(self.interrupted.wait())
            stopped = False
            while not all(f.done() for f in followers):
                await asyncio.wait([*followers, stopper], timeout=0.5,
                                   return_when=asyncio.FIRST_COMPLETED)
                if self.interrupted.is_set() and not stopped:
                    stopped = True
                    await asyncio.gather(*(h.stop() for h in handles), return_exceptions=True)
                elapsed = max(now_s() - start_at, 1e-3)
                done_bytes = sum(e.get("bytes", 0) for e in latest.values())
                bar.n = min(round(elapsed), bar.total)
                bar.set_postfix_str(f"{format_rate(done_bytes / elapsed)}, errors "
                                    f"{sum(e.get('errors', 0) for e in latest.values())}")
            stopper.cancel()
            for f in followers:
                f.result()
        finally:
            if self.interrupted.is_set():
                await asyncio.gather(*(h.stop() for h in handles), return_exceptions=True)
            for h, part in zip(handles, parts, strict=True):
                with contextlib.suppress(Exception):
                    codes.append(await h.finish(part))
            bar.close()
        merged = cfg.out / f"{phase_id}.csv.zst"
        self._merge(parts, merged, comment, [h.clock_offset_ns for h in handles])
        if op == "put" and not t.noclear:
            await delete_prefix(t, f"{t.prefix.strip('/')}/{run_id}/")
        return self._result(op, n, merged)

    @staticmethod
    def _merge(parts: list[Path], dest: Path, comment: str, offsets_ns: list[int]) -> None:
        """Each client's records moved onto our clock (``offsets_ns``: its clock - ours), in
        completion order as every record file (docs/warp-records.md)."""
        records = []
        for p, offset in zip(parts, offsets_ns, strict=True):
            if p.exists():
                records.extend([r.shifted(-offset) for r in read_records(p)])
        records.sort(key=lambda r: r.end_ns)
        write_records(dest, records, comment)
        for p in parts:
            p.unlink(missing_ok=True)

    def _result(self, op: str, n: int, records: Path) -> summary.PhaseResult:
        found = analyze_files([records], AnalysisOptions(trim_s=self.cfg.trim, op=op.upper()))
        conc = n * self.cfg.template.concurrent
        rel = str(records.relative_to(self.cfg.out))
        if not found:
            nan = math.nan
            return summary.PhaseResult(op.upper(), n, conc, rel, 0, 0, 0, nan, nan, nan, nan,
                                       None, None, None, None, 0, self.interrupted.is_set())
        a = found[0]
        return summary.PhaseResult(
            op=a.op, clients=n, concurrency=conc, records=rel, ops=a.ops, errors=a.errors,
            verify_failures=a.verify_failures, median_bps=a.median_bps,
            fastest_bps=a.fastest_bps, slowest_bps=a.slowest_bps, run_bps=a.run_bps,
            ttfb_p50_ms=a.ttfb.p50 if a.ttfb else None, ttfb_p99_ms=a.ttfb.p99 if a.ttfb else None,
            latency_p50_ms=a.latency.p50 if a.latency else None,
            latency_p99_ms=a.latency.p99 if a.latency else None,
            buckets=len(a.buckets_bps), interrupted=self.interrupted.is_set())

    # ---- output ---------------------------------------------------------------------------
    def write_summary(self) -> None:
        cfg = self.cfg
        meta = {"profile": {k: v for k, v in cfg.template.to_dict().items()
                            if k not in ("client_id", "prepared", "cleanup")},
                "clients": list(cfg.clients), "ops": list(cfg.ops), "agents": list(cfg.agents),
                "local_server": cfg.local_server, "trim_s": cfg.trim,
                "reference": cfg.reference or None, "interrupted": self.interrupted.is_set(),
                **cfg.meta}
        (cfg.out / "summary.json").write_text(summary.to_json(self.phases, meta))
        (cfg.out / "summary.csv").write_text(summary.to_csv(summary.table(self.phases)))

    def _title(self) -> str:
        t = self.cfg.template
        where = "local S3 server (moto)" if self.cfg.local_server else ", ".join(t.endpoints)
        return (f"{where}: {t.obj_size / 2**20:g} MiB objects, {t.concurrent} connections per "
                f"client, {t.duration:g} s phases")

    def _say(self, text: str) -> None:
        if self.cfg.progress:
            print(text, file=sys.stderr)
