"""One timed run of benchmarks/gateway_ceiling.py: one case (PUT or GET of one object size
through the S3 front, or native batch put / batch get) against one side (the bare aiohttp
server or a gateway), with the same client process for every side.

The client is a subprocess: ``s3kv bench put|get`` (UNSIGNED-PAYLOAD, one PUT per object, each
GET verified) for the S3 cases, benchmarks/ceiling_native.py for the batch cases. While it runs,
benchmarks/proc_sampler.py samples its CPU and the side's; the figures cover exactly the
window of its timed operations (first start to last end), as its own throughput does: MiB/s,
op/s, CPU-seconds per GiB and CPU-ms per op of the client and of the server side, and the
server's peak RSS over the whole run (preparation included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, ServerError
from benchmarks.proc_sampler import Sampler, peak_rss, reset_peak_rss
from s3kv.sizes import GiB, MiB, format_size

#: the S3 cases' bucket (the native cases' namespace is benchmarks/ceiling_native.py's)
BUCKET = "ceiling"
#: the operations of a case and the load generator each runs in
S3_OPS = ("put", "get")
BATCH_OPS = ("batch_put", "batch_get")


@dataclass(frozen=True)
class Case:
    op: str  # one of S3_OPS or BATCH_OPS
    size: int  # bytes per object (S3) or per block (batch)

    @property
    def label(self) -> str:
        return f"{self.op}_{format_size(self.size)}"


@dataclass(frozen=True)
class Side:
    name: str  # "bare", or the gateway's ETag mode
    url: str
    pid: int


@dataclass(frozen=True)
class Load:
    """What every run's client is given: the same for every side."""

    concurrent: int
    duration: float
    batch: int  # blocks per batch request
    set_bytes: int  # bytes of the object (block) set a GET run reads
    access: str
    secret: str
    workdir: Path  # the clients' record files

    def set_count(self, case: Case) -> int:
        """Objects (blocks) in a GET run's set: ``set_bytes`` of them, 4 objects (one batch of
        blocks) at least, at most 1024 objects (64 batches)."""
        if case.op == "batch_get":
            return max(self.batch, min(64 * self.batch, self.set_bytes // case.size))
        return max(4, min(1024, self.set_bytes // case.size))


def client_argv(case: Case, side: Side, load: Load) -> list[str]:
    common = ["--concurrent", str(load.concurrent)]
    if case.op in S3_OPS:
        argv = [sys.executable, "-m", "s3kv.cli", "bench", case.op, "--endpoint", side.url,
                "--bucket", BUCKET, "--obj-size", str(case.size), "--disable-multipart",
                "--duration", f"{load.duration}s", "--noclear", "--json",
                "--benchdata", str(load.workdir / f"{case.label}-{side.name}.csv.zst"), *common]
        return argv + (["--objects", str(load.set_count(case))] if case.op == "get" else [])
    argv = [sys.executable, "-m", "benchmarks.ceiling_native", "--url", side.url,
            "--token", f"{load.access}:{load.secret}", "--op", case.op.removeprefix("batch_"),
            "--block-size", str(case.size), "--batch", str(load.batch),
            "--duration", str(load.duration), *common]
    return argv + (["--set-blocks", str(load.set_count(case))] if case.op == "batch_get"
                   else [])


def client_env(load: Load) -> dict[str, str]:
    env = dict(os.environ, AWS_ACCESS_KEY_ID=load.access, AWS_SECRET_ACCESS_KEY=load.secret)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_once(case: Case, side: Side, load: Load) -> dict[str, Any]:
    """Run the case's client against the side once; its figures (raises ServerError when an
    operation failed or a byte read back was wrong)."""
    reset = reset_peak_rss(side.pid)
    proc = subprocess.Popen(client_argv(case, side, load), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=client_env(load), cwd=ROOT)
    with Sampler({"client": proc.pid, "server": side.pid}, loops=("server",)) as sampler:
        out, err = proc.communicate(timeout=load.duration + 600)
    try:
        op = json.loads(out)["operations"][0]
    except (ValueError, KeyError, IndexError):
        raise ServerError(f"{case.label} on {side.name}: the client printed no result "
                          f"(exit {proc.returncode}):\n{err[-2000:]}") from None
    if op["errors"] or op["verify_failures"] or not op["ops"]:
        raise ServerError(f"{case.label} on {side.name}: {op['ops']} ops, {op['errors']} "
                          f"errors, {op['verify_failures']} wrong reads; first: "
                          f"{op['first_error'] or err[-2000:]}")
    start, end, nbytes, ops = op["run_start_ns"], op["run_end_ns"], op["run_bytes"], op["ops"]
    seconds = max(end - start, 1) / 1e9
    cpu = sampler.cpu_between(start, end)
    peak = peak_rss(side.pid) if reset else None
    figures: dict[str, Any] = {"MiB_s": round(nbytes / MiB / seconds, 1),
                               "ops_s": round(ops / seconds, 1), "ops": ops,
                               "seconds": round(seconds, 3),
                               "peak_rss_MiB": round((peak or sampler.max_rss["server"]) / MiB),
                               "peak_anon_MiB": round(sampler.max_anon["server"] / MiB)}
    for name, used in cpu.items():
        figures[f"{name}_cpu_s_per_GiB"] = round(used * GiB / nbytes, 3)
        figures[f"{name}_cpu_ms_per_op"] = round(used * 1000 / ops, 4)
    return figures
