"""The gateway (packed segments) against plain one-object-per-block S3, same server, same workload.

    python benchmarks/kv_compare.py --split-cores --json kv.json -- --model qwen2.5-7b \\
        --users 4 --ranks 2 --duration 30s

Starts an S3 server (``benchmarks.harness``: Ceph RGW by default, or s3rver, moto, or
``--endpoint``), a gateway on it (``--gateway-args``, default 64 MiB segments of 16 MiB parts),
and runs ``s3kv bench kv`` with the same arguments (everything after ``--``) twice: against the
gateway's native API and against ``s3://BUCKET/plain?endpoint=...`` (a bucket of its own, which
bench kv creates). With ``--split-cores`` the server runs on one CPU and the gateway plus the
bench kv ranks on the other. Prints one line per target and pass (tokens/s read/written/total,
GiB/s, hit ratio, max-of-rank P95 read latency, restore p95) and the CPU-seconds each process
group spent per target; with ``--json FILE`` writes both reports, the CPU figures, and the
top-level ``tokens_ratio`` and ``p95_ratio`` (gateway / per-block, fresh pass; the replay
pass's as ``..._replay``). Stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    BenchServer,
    CPUMeter,
    ServerError,
    add_arguments,
    apply_topology,
    gateway_pid,
    gateway_process,
    server_from_args,
)

GATEWAY_ARGS = "--segment-size 64MiB --part-size 16MiB --max-block-size 32MiB --sync-interval 0"
ACCESS, SECRET = "kvcompare", "kvcompare-secret"


def _bench(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "s3kv.cli", "bench", "kv", *args, "--json"]
    print("$ s3kv bench kv " + " ".join(args), file=sys.stderr)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise ServerError(f"bench kv failed ({proc.returncode})")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def _children_cpu() -> float:
    t = psutil.Process().cpu_times()
    return float(t.children_user + t.children_system)


def _measured(meter: CPUMeter, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One bench kv run and the CPU-seconds each process group spent during it (``client``:
    the bench kv ranks, waited for)."""
    before, kids = meter.sample(), _children_cpu()
    doc = _bench(args, env)
    cpu = meter.delta(before, meter.sample())
    cpu["client"] = _children_cpu() - kids
    if "other" in cpu:  # the ranks are the client, not something outside the named processes
        cpu["other"] = max(0.0, cpu["other"] - cpu["client"])
    doc["cpu_s"] = {k: round(v, 2) for k, v in cpu.items()}
    return doc


def _pass(doc: dict[str, Any], number: int) -> dict[str, Any] | None:
    return next((p for p in doc["passes"] if int(p["pass"]) == number), None)


def ratios(reports: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """tokens/s and max-of-rank P95 read latency, gateway over per-block, for the fresh pass
    (pass 1) and, with ``--passes 2``, the first replay (pass 2, keys ``..._replay``)."""
    out: dict[str, float | None] = {}
    for number, suffix in ((1, ""), (2, "_replay")):
        gw, s3 = _pass(reports["gateway"], number), _pass(reports["s3-per-block"], number)
        if gw is None or s3 is None:
            continue
        out[f"tokens_ratio{suffix}"] = (round(gw["tokens_s"] / s3["tokens_s"], 3)
                                        if s3["tokens_s"] else None)
        g, s = gw["p95_read_ms_max_of_ranks"], s3["p95_read_ms_max_of_ranks"]
        out[f"p95_ratio{suffix}"] = round(g / s, 3) if g and s else None
    return out


def run(server: BenchServer, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, **server.env(), S3KV_ACCESS_KEY=ACCESS, S3KV_SECRET_KEY=SECRET)
    import boto3

    gw_bucket = f"kvcmp-gw-{uuid.uuid4().hex[:8]}"
    plain_bucket = f"kvcmp-plain-{uuid.uuid4().hex[:8]}"  # bench kv creates it
    boto3.client("s3", **server.client_kwargs()).create_bucket(Bucket=gw_bucket)
    store = f"s3://{gw_bucket}/gw?endpoint={server.url}"
    with gateway_process(server, store, ["--log-level", "warning", *args.gateway_args.split()],
                         access=ACCESS, secret=SECRET) as url:
        meter = CPUMeter.for_run(server, gateway=gateway_pid())
        reports = {
            "gateway": _measured(meter, ["--target", url, *args.bench], env),
            "s3-per-block": _measured(
                meter, ["--target", f"s3://{plain_bucket}/plain?endpoint={server.url}",
                        *args.bench], env),
        }
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--gateway-args", default=GATEWAY_ARGS,
                        help=f"extra `s3kv serve` flags (default: {GATEWAY_ARGS})")
    parser.add_argument("--json", default="", metavar="FILE",
                        help="write both reports, the CPU per target and the ratios here")
    parser.add_argument("bench", nargs="*", help="`s3kv bench kv` flags (after --)")
    args = parser.parse_args(argv)
    try:
        with server_from_args(args) as server:
            topology = apply_topology(server, args.split_cores, args.server_cpus).describe()
            reports = run(server, args)
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    summary = ratios(reports)
    print(f"server: {server.name}; gateway: {args.gateway_args}; "
          f"split cores: {topology['split_cores']}")
    print("target        pass  tok/s read  tok/s written  tok/s total  GiB/s r  GiB/s w  "
          "hit %  P95 read ms (max of ranks)  restore p95 ms  errors")
    for name, doc in reports.items():
        for p in doc["passes"]:
            print(f"{name:<13} {p['pass']:>4}  {p['read_tokens_s']:>10,.0f}  "
                  f"{p['write_tokens_s']:>13,.0f}  {p['tokens_s']:>11,.0f}  "
                  f"{p['read_gib_s']:>7.3f}  {p['write_gib_s']:>7.3f}  "
                  f"{100 * (p['hit_ratio'] or 0):>5.1f}  "
                  f"{p['p95_read_ms_max_of_ranks'] or 0:>27,.1f}  "
                  f"{p['restore_ms']['p95'] or 0:>14,.1f}  {p['errors']}")
    for name, doc in reports.items():
        print(f"CPU-s during {name}: " + ", ".join(f"{k} {v:.1f}"
                                                  for k, v in sorted(doc["cpu_s"].items())))
    print("  ".join(f"{k} {v}" for k, v in summary.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"server": server.name, **topology,
                                               "gateway_args": args.gateway_args, **summary,
                                               **reports}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
