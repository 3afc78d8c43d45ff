"""Where a benchmark's processes run (``--split-cores``, ``--server-cpus``).

Storage nodes and inference nodes are different machines. On one machine, ``--split-cores``
gives the S3 server's processes (RGW: radosgw, OSD, mon, every thread) a share of the CPUs this
process may use, the storage node, and this process the rest, the inference node: the client
and everything it starts afterwards (the gateway, ``s3kv bench`` subprocesses) inherit those
CPUs, so the direct path gets the same split. The server's share is the first half of the
allowed CPUs (one of two on a 2-CPU machine), or exactly ``--server-cpus``. Without either flag
everything shares every CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from dataclasses import dataclass
from typing import Any

import psutil

from benchmarks.servers import BenchServer, ServerError


def parse_cpus(text: str) -> tuple[int, ...]:
    """``0-3,8`` -> (0, 1, 2, 3, 8): CPU numbers as ``taskset --cpu-list`` writes them."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not a CPU number or range (write e.g. 0-3,8)") from None
        if first < 0 or last < first:
            raise argparse.ArgumentTypeError(f"{part!r}: write a range low-high, e.g. 0-3")
        cpus.update(range(first, last + 1))
    if not cpus:
        raise argparse.ArgumentTypeError("no CPUs given (write e.g. 0-3,8)")
    return tuple(sorted(cpus))


def _server_cpus(text: str) -> tuple[int, ...]:
    """``--server-cpus``, checked against the CPUs this process may use before any server
    starts."""
    cpus = parse_cpus(text)
    try:
        split_cpus(tuple(sorted(os.sched_getaffinity(0))), cpus)
    except ServerError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return cpus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split-cores", action="store_true",
                        help="pin the S3 server's processes (every thread) to the first half of "
                        "the CPUs this benchmark may use (one CPU of two) and the client, the "
                        "gateway and everything else it starts to the other half, as storage "
                        "and inference nodes are separate machines (needs 2 CPUs) "
                        "[default: everything shares every CPU]")
    parser.add_argument("--server-cpus", type=_server_cpus, default=(), metavar="LIST",
                        help="with the split, exactly these CPUs for the S3 server (e.g. 0-7); "
                        "the rest of the allowed CPUs for everything else; implies "
                        "--split-cores [default: the first half]")


def split_cpus(allowed: tuple[int, ...],
               server: tuple[int, ...] = ()) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the server's CPUs, everything else's) out of ``allowed``: ``server`` if given, else
    the first half of ``allowed`` (at least one)."""
    if len(allowed) < 2:
        raise ServerError("--split-cores needs at least 2 CPUs")
    if server:
        outside = sorted(set(server) - set(allowed))
        if outside:
            raise ServerError(f"CPU {outside[0]} is not one this benchmark may use "
                              f"({', '.join(map(str, allowed))})")
        rest = tuple(c for c in allowed if c not in server)
        if not rest:
            raise ServerError("that leaves no CPU for the client and the gateway")
        return tuple(sorted(server)), rest
    half = max(1, len(allowed) // 2)
    return allowed[:half], allowed[half:]


@dataclass(frozen=True)
class Topology:
    split: bool
    server_cpus: tuple[int, ...]
    client_cpus: tuple[int, ...]

    def describe(self) -> dict[str, Any]:
        return {"split_cores": self.split, "server_cpus": list(self.server_cpus),
                "client_cpus": list(self.client_cpus)}


def _tree(pid: int) -> list[psutil.Process]:
    """``pid`` and its descendants."""
    procs = [psutil.Process(pid)]
    with contextlib.suppress(psutil.Error):
        procs += procs[0].children(recursive=True)
    return procs


def _pin_tree(pid: int, cpus: set[int], skip: frozenset[int] = frozenset()) -> None:
    """Every thread of ``pid`` and of its descendants, but the processes in ``skip``, to
    ``cpus``."""
    for proc in _tree(pid):
        if proc.pid in skip:
            continue
        try:
            tids = [t.id for t in proc.threads()]
        except psutil.Error:
            continue
        for tid in tids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.sched_setaffinity(tid, cpus)


def apply_topology(server: BenchServer, split: bool,
                   server_cpus: tuple[int, ...] = ()) -> Topology:
    """With ``split`` (or ``server_cpus``), the server's processes on their CPUs and this
    process on the others (:func:`split_cpus`)."""
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    if not split and not server_cpus:
        return Topology(False, allowed, allowed)
    on_server, on_client = split_cpus(allowed, server_cpus)
    if not server.pids:
        raise ServerError("--split-cores needs a server this benchmark started (not --endpoint)")
    # the server's daemons are this process's children: pinning this process's tree to the
    # client CPUs must leave them where they are (it used to move them to the client CPU too)
    server_tree: set[int] = set()
    for pid in server.pids:
        with contextlib.suppress(psutil.Error):
            server_tree.update(p.pid for p in _tree(pid))
        _pin_tree(pid, set(on_server))
    _pin_tree(os.getpid(), set(on_client), frozenset(server_tree))
    return Topology(True, on_server, on_client)
