"""``s3kv tune``: measure segment/part size and concurrency on an endpoint; recommend a layout.

The measurements and the rule are in :mod:`s3kv.tuning`; this module parses flags and prints
the table, the recommendation and its reason (text or JSON), and writes the recommended
gateway settings as TOML for ``s3kv serve --config FILE``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from s3kv.argtypes import arg_type
from s3kv.errors import ConfigError
from s3kv.outputs import output_file
from s3kv.sizes import MiB, format_size, parse_size


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(parse_size(x) for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"invalid list of integers {text!r}: write 1,4,16") from None


def register(subparsers: Any) -> None:
    from warp.units import parse_duration

    p = subparsers.add_parser(
        "tune", help="measure object layouts (segment size, part size, concurrency) on an "
                     "endpoint and recommend the gateway's",
        description="Writes segment-sized objects as multipart uploads and reads block-sized "
                    "ranges back for each layout (segment size, part size, concurrency), within "
                    "--budget seconds; prints the table, the recommended --segment-size, "
                    "--part-size and --max-parts-in-flight, and the rule that chose them: the "
                    "smallest segment (then lowest concurrency, then largest part) within "
                    "--tolerance of the best score = min(PUT/best PUT, GET/best GET), among "
                    "layouts whose TTFB p99 is at most max(--ttfb-factor x the lowest, lowest + "
                    "--ttfb-slack-ms). Removes every object it wrote. Credentials from "
                    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY. Details: docs/tuning.md.")
    p.add_argument("--endpoint", required=True, metavar="URL[,URL...]",
                   help="S3 endpoint(s), used round-robin (e.g. one per MinIO node)")
    p.add_argument("--bucket", required=True, help="bucket to write into (created if missing)")
    p.add_argument("--budget", type=arg_type(parse_duration), default=60.0, metavar="SECONDS",
                   help="time for all measurements: 60, 5m (default 60 s; a layout started "
                        "finishes its phase)")
    p.add_argument("--segment-sizes", type=arg_type(_sizes), default=(16 * MiB, 64 * MiB, 256 * MiB,
                                                            512 * MiB), metavar="LIST",
                   help="segment (object) sizes to try (default 16MiB,64MiB,256MiB,512MiB)")
    p.add_argument("--part-sizes", type=arg_type(_sizes), default=(8 * MiB, 16 * MiB, 32 * MiB),
                   metavar="LIST", help="multipart part sizes, >= 5MiB (default 8MiB,16MiB,32MiB)")
    p.add_argument("--concurrency", type=arg_type(_ints), default=(1, 4, 16), metavar="LIST",
                   help="part uploads / ranged GETs in flight (default 1,4,16)")
    p.add_argument("--block-size", type=arg_type(parse_size), default=2 * MiB, metavar="SIZE",
                   help="ranged-GET size: the KV block size (default 2MiB: llama3.1-8b x 16 "
                        "tokens)")
    p.add_argument("--tolerance", type=float, default=0.05, metavar="X",
                   help="score tolerance of the rule: a layout qualifies within this share of the "
                        "best score, 0 <= X < 1 (default 0.05)")
    p.add_argument("--ttfb-factor", type=float, default=2.0, metavar="X",
                   help="TTFB p99 bound: X (>= 1) times the lowest (default 2)")
    p.add_argument("--ttfb-slack-ms", type=float, default=10.0, metavar="MS",
                   help="... or the lowest plus MS (>= 0), whichever is larger (default 10)")
    p.add_argument("--prefix", default="s3kv-tune", help="key prefix (default s3kv-tune)")
    p.add_argument("--region", default="", help="SigV4 region (default AWS_REGION/us-east-1)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--write-config", default="", metavar="FILE",
                   help="write the recommended gateway settings as TOML (s3kv serve --config "
                        "FILE or S3KV_CONFIG)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from tqdm import tqdm

    from s3kv.tuning import Tuner, TuneSpec, gateway_settings, recommend, row_dict, to_toml

    if args.write_config:  # before the run: a path it cannot write would lose the run
        output_file(args.write_config, "--write-config")
    spec = TuneSpec(
        endpoints=tuple(e.strip() for e in args.endpoint.split(",") if e.strip()),
        bucket=args.bucket, segment_sizes=args.segment_sizes, part_sizes=args.part_sizes,
        concurrency=args.concurrency, block_size=args.block_size, budget=args.budget,
        tolerance=args.tolerance, ttfb_factor=args.ttfb_factor,
        ttfb_slack_ms=args.ttfb_slack_ms, prefix=args.prefix, region=args.region)
    bar = tqdm(total=round(spec.budget), unit="s", desc="tune", file=sys.stderr,
               disable=True if args.json else None, leave=False)
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        bar.n = min(bar.total, round(time.monotonic() - t0))
        bar.set_postfix_str(msg)

    try:
        rows = asyncio.run(Tuner(spec, progress).run())
    finally:
        bar.close()
    rec = recommend(rows, spec.tolerance, spec.ttfb_factor, spec.ttfb_slack_ms)
    settings = gateway_settings(rec.row) if rec.row is not None else {}
    doc = {
        "endpoint": ",".join(spec.endpoints), "bucket": spec.bucket, "budget_s": spec.budget,
        "block_size": spec.block_size, "elapsed_s": time.monotonic() - t0,
        "rule": {"tolerance": spec.tolerance, "ttfb_factor": spec.ttfb_factor,
                 "ttfb_slack_ms": spec.ttfb_slack_ms, "ttfb_bound_ms": _num(rec.ttfb_bound_ms)},
        "rows": [row_dict(r) for r in rows],
        "recommended": row_dict(rec.row) if rec.row is not None else None,
        "settings": settings, "reason": rec.reason,
    }
    if args.write_config and rec.row is not None:
        comment = (f"s3kv tune against {doc['endpoint']} on {time.strftime('%Y-%m-%d %H:%M')}"
                   f"\n{rec.reason}")
        Path(args.write_config).write_text(to_toml(settings, comment))
        doc["config_file"] = args.write_config
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(to_text(doc))
    return 0 if rec.row is not None else 1


def _num(v: float) -> float | None:
    return None if math.isnan(v) else v


def _f(v: Any, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v / scale)


def to_text(doc: dict[str, Any]) -> str:
    rec = doc["recommended"]
    lines = [f"s3kv tune: {doc['endpoint']} bucket {doc['bucket']}, ranged GETs of "
             f"{format_size(doc['block_size'])}, {doc['elapsed_s']:.0f} s",
             "",
             "   segment    part  conc  PUT MiB/s  GET MiB/s  TTFB p50  TTFB p99  score  "
             "objects  GETs  note"]
    for r in doc["rows"]:
        mark = "*" if rec is not None and all(
            r[k] == rec[k] for k in ("segment_size", "part_size", "concurrency")) else " "
        note = r["skipped"] or (f"{r['errors']} errors: {r['first_error'][:60]}"
                                if r["errors"] else "")
        lines.append(
            f"{mark} {format_size(r['segment_size']):>8}  {format_size(r['part_size']):>6}  "
            f"{r['concurrency']:>4}  {_f(r['put_bps'], MiB):>9}  {_f(r['get_bps'], MiB):>9}  "
            f"{_f(r['ttfb_p50_ms']):>8}  {_f(r['ttfb_p99_ms']):>8}  "
            f"{_f(r['score'], 1, '{:.3f}'):>5}  {r['objects']:>7}  {r['gets']:>4}  {note}")
    lines.append("")
    if rec is None:
        lines.append(f"no recommendation: {doc['reason']}")
    else:
        s = doc["settings"]
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in s.items())
        lines += [f"recommended (*): s3kv serve {flags}", f"because: {doc['reason']}"]
        if "config_file" in doc:
            lines.append(f"wrote {doc['config_file']} (s3kv serve --config "
                         f"{doc['config_file']})")
    return "\n".join(lines)
