"""How a benchmark script runs its measurement: on the S3 server its flags name
(:func:`benchmarks.harness.add_arguments`), with ``--split-cores`` applied, a
:class:`~benchmarks.servers.ServerError` reported as the script's error."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from benchmarks.harness import BenchServer, ServerError, apply_topology, server_from_args

#: one measurement on a started server and its topology (``Topology.describe()``)
Measure = Callable[[BenchServer, dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]


def run_on_server(args: argparse.Namespace, measure: Measure) -> dict[str, Any] | None:
    """Starts the server, applies the topology and runs ``measure(server, topology)``: its
    results, or None (the error on stderr) when any of them raised :class:`ServerError`."""
    try:
        with server_from_args(args) as server:
            topology = apply_topology(server, args.split_cores, args.server_cpus).describe()
            return asyncio.run(measure(server, topology))
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
