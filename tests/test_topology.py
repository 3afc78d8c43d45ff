"""``--split-cores`` (benchmarks.harness.apply_topology): the S3 server's processes, which the
benchmark itself started, stay on the server CPU when the benchmark pins its own tree to the
client CPU. (It once moved them back: every split run ran on one core, the other idle.) On a
larger machine the server gets the first half of the CPUs, or those ``--server-cpus`` names."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from benchmarks.harness import add_arguments, apply_topology
from benchmarks.servers import BenchServer, ServerError
from benchmarks.topology import parse_cpus, split_cpus

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


def test_the_split_gives_the_server_the_first_half_or_the_cpus_named() -> None:
    assert split_cpus((0, 1)) == ((0,), (1,))
    assert split_cpus((0, 1, 2)) == ((0,), (1, 2))
    assert split_cpus(tuple(range(16))) == (tuple(range(8)), tuple(range(8, 16)))
    assert split_cpus(tuple(range(8)), (2, 3)) == ((2, 3), (0, 1, 4, 5, 6, 7))
    with pytest.raises(ServerError, match="at least 2 CPUs"):
        split_cpus((0,))
    with pytest.raises(ServerError, match="CPU 9 is not one"):
        split_cpus((0, 1, 2, 3), (2, 9))
    with pytest.raises(ServerError, match="no CPU for the client"):
        split_cpus((0, 1), (0, 1))


def test_server_cpus_are_read_as_taskset_writes_them() -> None:
    assert parse_cpus("0-3,8") == (0, 1, 2, 3, 8)
    assert parse_cpus(" 5 , 1-2,") == (1, 2, 5)
    for bad in ("", "a", "3-1", "-2", "1-x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_cpus(bad)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    allowed = sorted(os.sched_getaffinity(0))
    assert parser.parse_args([]).server_cpus == ()
    if len(allowed) >= 2:
        assert parser.parse_args(["--server-cpus", str(allowed[0])]).server_cpus == (allowed[0],)
    # checked before any server starts: unknown text, a CPU not allowed, none left over
    for bad in ("x", str(max(allowed) + 1), ",".join(map(str, allowed))):
        with pytest.raises(SystemExit):
            parser.parse_args(["--server-cpus", bad])
