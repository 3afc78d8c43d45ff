"""``--split-cores`` (benchmarks.harness.apply_topology): the S3 server's processes, which the
benchmark itself started, stay on the server CPU when the benchmark pins its own tree to the
client CPU. (It once moved them back: every split run ran on one core, the other idle.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from benchmarks.harness import apply_topology
from benchmarks.servers import BenchServer

#: a "server" that starts a helper process of its own, then waits
SERVER = ("import subprocess, sys, time\n"
          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
          "time.sleep(60)\n")


@pytest.fixture
def own_affinity() -> Iterator[set[int]]:
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        pytest.skip("--split-cores needs two CPUs")
    try:
        yield before
    finally:
        os.sched_setaffinity(0, before)  # the rest of the session runs on every CPU again


def test_split_cores_keeps_the_servers_processes_on_their_cpu(own_affinity: set[int]) -> None:
    server = subprocess.Popen([sys.executable, "-c", SERVER])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 20
        while not psutil.Process(server.pid).children():
            assert time.monotonic() < deadline, "the server's helper process never started"
            time.sleep(0.05)
        (helper,) = psutil.Process(server.pid).children()
        topo = apply_topology(BenchServer("http://127.0.0.1:1", "external",
                                          pids=(server.pid,)), True)
        server_cpu, client_cpu = topo.server_cpus[0], topo.client_cpus[0]
        assert server_cpu != client_cpu
        for pid in (server.pid, helper.pid):
            assert os.sched_getaffinity(pid) == {server_cpu}, pid
        assert os.sched_getaffinity(0) == {client_cpu}
        assert os.sched_getaffinity(bystander.pid) == {client_cpu}  # the rest of the tree
    finally:
        for proc in psutil.Process(server.pid).children(recursive=True):
            proc.kill()
        server.kill()
        bystander.kill()
        server.wait()
        bystander.wait()
