"""``s3kv bench TYPE``: Warp-style S3 benchmarks (put, get, mixed, stat, delete, list).

The types offered are the modules in ``BENCH_TYPES``. A module with ``BENCHMARK`` and ``HELP``
gets the standard flags (``warp.flags``); a module with its own ``register(subparsers)`` adds
its own subcommand (e.g. a KV-block benchmark). Adding a type is one line here.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

BENCH_TYPES: tuple[str, ...] = (
    "warp.benchmarks.put",
    "warp.benchmarks.get",
    "warp.benchmarks.mixed",
    "warp.benchmarks.stat",
    "warp.benchmarks.delete",
    "warp.benchmarks.list",
    "s3kv.kvbench.command",
)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    from warp.command import add_benchmark_command

    p = subparsers.add_parser(
        "bench", help="run one Warp-style S3 benchmark from this process",
        description="Warp-style S3 benchmarks against an endpoint (or, without --endpoint, a "
                    "local S3 server). Every operation is recorded; the analysis is printed "
                    "at the end. Exit status 1 when operations failed.")
    types = p.add_subparsers(dest="bench_type", metavar="TYPE", required=True)
    for name in BENCH_TYPES:
        module = importlib.import_module(name)
        if hasattr(module, "register"):
            module.register(types)
        else:
            add_benchmark_command(types, name.rsplit(".", 1)[-1], module)
