"""``s3kv bench kv``: flags, the rank processes, passes, the progress bar and the report."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import uuid
from typing import Any

from s3kv.argtypes import arg_type
from s3kv.errors import ConfigError
from s3kv.kvbench.rank import RunSpec
from s3kv.kvbench.report import pass_report, to_text
from s3kv.kvbench.targets import parse_target
from s3kv.kvbench.workload import ContextDist
from s3kv.models import get_model, kv_bytes_per_token, model_names
from s3kv.outputs import output_dir
from s3kv.sizes import parse_size
from warp.units import parse_duration

TIERS = ("storage", "storage+dram")
DEFAULT_TARGET = "http://127.0.0.1:9470"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "kv", help="KV-cache workload: users in multi-turn conversations restoring and "
                   "writing prefix-chain blocks (gateway or plain per-block S3)",
        description="Simulated users hold multi-turn conversations: each turn looks up its "
                    "context's prefix chain, restores the blocks present and writes the rest. "
                    "Reports storage-tier tokens/s and GiB/s read and written, P50/P95/P99 "
                    "read latency per rank and the max of per-rank P95 (MLPerf), the hit ratio "
                    "and the time to restore a prefix. Workload and figures: docs/kv-bench.md.")
    g = p.add_argument_group("target")
    g.add_argument("--target", default=DEFAULT_TARGET, metavar="URL",
                   help="http://HOST:PORT: the gateway's native API (blocks packed into "
                        "segments); s3://BUCKET/PREFIX?endpoint=URL: one S3 object per block, "
                        "credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                        f"(default {DEFAULT_TARGET})")
    g.add_argument("--token", default="", metavar="ACCESS:SECRET",
                   help="gateway bearer token (default: S3KV_ACCESS_KEY:S3KV_SECRET_KEY from "
                        "the environment; none for a gateway without credentials)")
    g.add_argument("--namespace", default="", metavar="NS",
                   help="gateway namespace to use (default kvbench-RUNID, created and removed)")
    g.add_argument("--tier", choices=TIERS, default="storage",
                   help="storage: the gateway must have no DRAM tier; storage+dram: it must "
                        "have one (the gateway's --dram-cache SIZE); the DRAM hit ratio comes "
                        "from the gateway's /v1/stats (default storage)")
    g = p.add_argument_group("model and blocks")
    m = g.add_mutually_exclusive_group()
    m.add_argument("--model", default="llama3.1-8b", metavar="NAME",
                   help=f"KV geometry (bf16): {', '.join(model_names())} (default llama3.1-8b)")
    m.add_argument("--bytes-per-token", type=arg_type(parse_size), default=None, metavar="SIZE",
                   help="KV bytes per token of the whole model instead of --model (e.g. 128KiB)")
    g.add_argument("--block-tokens", type=int, default=16, metavar="N",
                   help="tokens per KV block (default 16)")
    g.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor parallelism: each rank stores 1/tp of the KV heads (default 1)")
    g = p.add_argument_group("workload")
    g.add_argument("--users", type=int, default=4, metavar="N",
                   help="simulated users per rank (default 4)")
    g.add_argument("--ranks", type=int, default=1, metavar="N",
                   help="ranks: separate OS processes, each with its own users and "
                        "connections (default 1)")
    g.add_argument("--duration", type=arg_type(parse_duration), default=30.0, metavar="DURATION",
                   help="length of the fresh pass: 30s, 2m (default 30s)")
    g.add_argument("--context-tokens", type=arg_type(ContextDist.parse),
                   default="uniform:1024-4096", metavar="DIST",
                   help="total context length per conversation: N, uniform:LO-HI or "
                        "lognormal:MEAN,SIGMA (default uniform:1024-4096)")
    g.add_argument("--turns", type=int, default=4, metavar="N",
                   help="turns per conversation (default 4)")
    g.add_argument("--system-prompt-tokens", type=int, default=1024, metavar="N",
                   help="system prompt length at the start of every conversation (default 1024)")
    g.add_argument("--shared-share", type=float, default=0.5, metavar="X",
                   help="share of users whose system prompt is a shared one (default 0.5)")
    g.add_argument("--system-prompts", type=int, default=1, metavar="N",
                   help="distinct shared system prompts (default 1)")
    g.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    g.add_argument("--passes", type=int, default=1, metavar="N",
                   help="1: one fresh pass; N > 1: then N-1 replays of exactly the turns the "
                        "fresh pass completed, which must hit everything (default 1)")
    g = p.add_argument_group("client")
    g.add_argument("--inflight", type=int, default=4, metavar="N",
                   help="requests in flight per user and step: per-block S3's HEADs, GETs "
                        "and PUTs, the gateway's batch puts (default 4)")
    g.add_argument("--batch-size", type=arg_type(parse_size), default=32 << 20, metavar="SIZE",
                   help="bytes per gateway batch-put request (default 32MiB); the gateway "
                        "restores a prefix with one streamed batch-get, as s3kv's client does")
    g.add_argument("--benchdata", default="", metavar="DIR",
                   help="write every request to DIR/kv-rankNNN.csv.zst (Warp's record format)")
    g.add_argument("--noclear", action="store_true",
                   help="keep the blocks written (default: remove them at the end)")
    g.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def block_geometry(args: argparse.Namespace) -> tuple[str, int, int]:
    """(model label, bytes per token on one TP rank, block bytes)."""
    if args.block_tokens < 1 or args.tp < 1:
        raise ConfigError("--block-tokens and --tp must be positive")
    if args.bytes_per_token is not None:
        if args.bytes_per_token < 1 or args.bytes_per_token % args.tp:
            raise ConfigError("--bytes-per-token must be positive and divisible by --tp")
        per = args.bytes_per_token // args.tp
        label = "custom"
    else:
        per = kv_bytes_per_token(get_model(args.model), args.tp)
        label = get_model(args.model).name
    return label, per, per * args.block_tokens


def run(args: argparse.Namespace) -> int:
    kind, target = parse_target(args.target)
    if kind == "s3" and args.tier != "storage":
        raise ConfigError("--tier storage+dram needs the gateway (its --dram-cache); plain S3 "
                          "has no DRAM tier")
    for name in ("users", "ranks", "turns", "passes", "inflight"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name} must be at least 1")
    if args.duration <= 0:
        raise ConfigError("--duration must be positive: a fresh pass of 0 s measures nothing")
    if args.batch_size < 1:
        raise ConfigError("--batch-size must be at least 1 byte")
    if args.token and not args.token.partition(":")[2]:
        raise ConfigError("--token must be ACCESS:SECRET, the gateway's front credentials")
    label, per_token, block = block_geometry(args)
    run_id = uuid.uuid4().hex[:8]
    token = args.token or (f"{os.environ['S3KV_ACCESS_KEY']}:{os.environ['S3KV_SECRET_KEY']}"
                           if os.environ.get("S3KV_ACCESS_KEY") and
                           os.environ.get("S3KV_SECRET_KEY") else "")
    spec = RunSpec(
        target=target, kind=kind, namespace=args.namespace or f"kvbench-{run_id}",
        run_prefix=f"kvbench/{run_id}/", token=token, ranks=args.ranks, users=args.users,
        block_tokens=args.block_tokens, block_bytes=block, context=str(args.context_tokens),
        turns=args.turns, system_prompt_tokens=args.system_prompt_tokens,
        shared_share=args.shared_share, system_prompts=args.system_prompts, seed=args.seed,
        inflight=args.inflight, batch_bytes=args.batch_size,
        records_dir=str(output_dir(args.benchdata, "--benchdata").absolute())
        if args.benchdata else "")
    spec.workload()  # validates
    header: dict[str, Any] = {
        "target": target, "kind": kind, "model": label, "bytes_per_token": per_token,
        "block_tokens": args.block_tokens, "block_bytes": block, "tp": args.tp,
        "ranks": args.ranks, "users": args.users, "turns": args.turns,
        "context": spec.context, "system_prompt_tokens": args.system_prompt_tokens,
        "shared_share": args.shared_share, "system_prompts": args.system_prompts,
        "seed": args.seed, "tier": args.tier, "duration_s": args.duration,
        "passes": args.passes, "inflight": args.inflight, "batch_bytes": args.batch_size,
        "namespace": spec.namespace if kind == "gateway" else None,
        "run_prefix": spec.run_prefix if kind == "s3" else None, "warnings": [],
    }
    from s3kv.kvbench.coordinator import Coordinator

    coord = Coordinator(spec, args.tier, keep=args.noclear, progress=not args.json)
    try:
        passes = asyncio.run(coord.run(args.duration, args.passes))
    except KeyboardInterrupt:
        print("s3kv bench kv: interrupted", file=sys.stderr)
        return 130
    header["warnings"] = coord.warnings
    docs = [pass_report(results, args.block_tokens, gw) for results, gw in passes]
    if args.json:
        print(json.dumps(_clean({"config": header, "passes": docs}), indent=2))
    else:
        print(to_text(header, docs), end="")
    bad = any(d["errors"] or d["verify_failures"] for d in docs)
    return 1 if bad else 0


def _clean(value: Any) -> Any:
    """NaN (no data) as null, so the JSON is standard."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value
