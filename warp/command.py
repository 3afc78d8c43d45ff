"""``s3kv bench TYPE``: one client in this process, then Warp's analysis of its records."""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from pathlib import Path
from types import ModuleType

from tqdm import tqdm

from s3kv.outputs import output_file
from warp.analysis import AnalysisOptions, analyze_files
from warp.analysis.report import to_dict, to_text
from warp.benchmarks import load
from warp.flags import add_client_flags, config_from_args, endpoints_of, profile_of
from warp.localserver import LocalS3Server
from warp.recorder import LiveStats
from warp.runner import run_client


def default_records_path(op: str) -> Path:
    """Warp's naming: ``warp-OP-YYYY-MM-DD[HHMMSS]-XXXX.csv.zst`` in the working directory."""
    stamp = time.strftime("%Y-%m-%d[%H%M%S]")
    return Path(f"warp-{op}-{stamp}-{secrets.token_hex(2)}.csv.zst")


def add_benchmark_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
                          name: str, module: ModuleType) -> None:
    """The standard subcommand for a benchmark module with ``BENCHMARK`` and ``HELP``."""
    p = subparsers.add_parser(
        name, help=module.HELP, description=f"{module.HELP}. Every operation is recorded to "
        "--benchdata (Warp's .csv.zst format); the analysis is printed at the end.")
    add_client_flags(p)
    p.add_argument("--benchdata", default="", metavar="FILE",
                   help="record file to write (default warp-OP-DATE-XXXX.csv.zst here)")
    p.set_defaults(func=lambda args: run_bench(args, name))


def run_bench(args: argparse.Namespace, op: str) -> int:
    endpoints = endpoints_of(args)
    server: LocalS3Server | None = None
    if not endpoints:
        server = LocalS3Server()
        endpoints = (server.endpoint,)
    config = config_from_args(args, op, endpoints)  # every flag checked before a server starts
    if server is not None:
        server.start()
        print(f"no --endpoint: started a local S3 server at {server.endpoint} (short local "
              "profile)", file=sys.stderr)
    try:
        path = output_file(args.benchdata or default_records_path(op), "--benchdata")
        bar = tqdm(total=round(config.duration), unit="s", desc=f"{op} c={config.concurrent}",
                   file=sys.stderr, disable=True if args.json else None, leave=False)

        def progress(stats: LiveStats, elapsed: float) -> None:
            bar.n = min(round(elapsed), bar.total)
            bar.set_postfix(ops=stats.ops, MiB=stats.bytes >> 20, errors=stats.errors)

        comment = "s3kv bench " + json.dumps(config.to_dict(), default=str)
        try:
            result = asyncio.run(run_client(config, load(op), path, progress=progress,
                                            comment=comment))
        finally:
            bar.close()
    finally:
        if server is not None:
            server.stop()
    analyses = analyze_files([path], AnalysisOptions(trim_s=profile_of(args).trim))
    if args.json:
        print(json.dumps({"records": str(path), "interrupted": result.interrupted,
                          "operations": [to_dict(a) for a in analyses]}, indent=2))
    else:
        print(to_text(analyses), end="")
        print(f"Records: {path}")
    if result.interrupted:
        return 130
    return 1 if result.stats.errors else 0
