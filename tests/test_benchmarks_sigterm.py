"""A benchmark killed with SIGTERM (``kill``, ``timeout``, a CI job's end) stops the servers
and gateways it started, as Ctrl-C does, instead of leaving them running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent

# a benchmark in miniature: an S3 server (moto) and a gateway on a file store, then a wait
_SCRIPT = """
import sys, time
from benchmarks.harness import gateway_subprocess
from benchmarks.servers import bench_server
with bench_server("moto") as server, gateway_subprocess(
        None, "file://" + sys.argv[1], ["--log-level", "warning"], access=None,
        secret=None) as gw:
    print(*server.pids, gw.pid, flush=True)
    time.sleep(120)
"""


def test_sigterm_stops_what_the_benchmark_started(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(tmp_path / "store")], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        children = [int(p) for p in proc.stdout.readline().split()]
        assert len(children) == 2 and all(psutil.pid_exists(p) for p in children)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) != 0  # it stops as on Ctrl-C, through its with blocks
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in children)
    finally:
        proc.kill()
        proc.wait()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
