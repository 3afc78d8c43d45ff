"""``s3kv analyze FILE...``: Warp's analysis of saved records (ours or Warp's own)."""

from __future__ import annotations

import argparse
from typing import Any

from s3kv.argtypes import arg_type
from warp.units import parse_duration


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "analyze", help="analyse saved benchmark records (Warp .csv.zst files)",
        description="Analyse record files as one run (one file per client is fine): Warp's "
                    "windowed figures (1 s buckets summed over clients, first/last 2 s "
                    "dropped, upper median, fastest and slowest bucket, TTFB and latency "
                    "p50/p90/p99) and exact whole-run figures (all successful operations), "
                    "each labelled. Exit status 1 when the records hold errors.")
    p.add_argument("files", nargs="+", metavar="FILE", help="record files (.csv.zst or .csv)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    out.add_argument("--csv", action="store_true", help="print CSV, one row per operation type")
    p.add_argument("--op", default="", metavar="OP",
                   help="only this operation type (PUT, GET, STAT, DELETE, LIST)")
    duration = arg_type(parse_duration)
    p.add_argument("--trim", type=duration, default=2.0, metavar="DURATION",
                   help="seconds dropped at each end of the run (default 2s, as Warp)")
    p.add_argument("--bucket-duration", type=duration, default=1.0, metavar="DURATION",
                   help="length of a throughput bucket (default 1s, as Warp)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from warp.analysis import AnalysisOptions, analyze_files
    from warp.analysis.report import to_csv, to_json, to_text

    results = analyze_files(args.files, AnalysisOptions(bucket_s=args.bucket_duration,
                                                         trim_s=args.trim, op=args.op))
    print(to_json(results) if args.json else to_csv(results) if args.csv else to_text(results),
          end="" if args.csv else "\n")
    return 1 if any(a.errors for a in results) else 0
