"""The gateway (packed segments) against plain one-object-per-block S3, same server, same workload.

    python benchmarks/kv_compare.py --server s3rver -- --users 4 --ranks 2 --duration 30s

Starts an S3 server (``benchmarks.servers``: s3rver by default, or moto, or ``--endpoint``), a
gateway on it (``--gateway-args``, default 64 MiB segments of 16 MiB parts), and runs
``s3kv bench kv`` with the same arguments (everything after ``--``) twice: against the gateway's
native API and against ``s3://BUCKET/plain?endpoint=...``. Prints one line per target and pass
(tokens/s read/written/total, GiB/s, hit ratio, max-of-rank P95 read latency, restore p95) and,
with ``--json FILE``, writes both reports. Stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import add_server_arguments, free_port, server_from_args  # noqa: E402

GATEWAY_ARGS = "--segment-size 64MiB --part-size 16MiB --max-block-size 32MiB --sync-interval 0"
ACCESS, SECRET = "kvcompare", "kvcompare-secret"


def _bench(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "s3kv.cli", "bench", "kv", *args, "--json"]
    print("$ s3kv bench kv " + " ".join(args), file=sys.stderr)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bench kv failed ({proc.returncode})")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arguments(parser)
    parser.add_argument("--gateway-args", default=GATEWAY_ARGS,
                        help=f"extra `s3kv serve` flags (default: {GATEWAY_ARGS})")
    parser.add_argument("--json", default="", metavar="FILE", help="write both reports here")
    parser.add_argument("bench", nargs="*", help="`s3kv bench kv` flags (after --)")
    args = parser.parse_args()
    with server_from_args(args) as server:
        env = dict(os.environ, **server.env(), S3KV_ACCESS_KEY=ACCESS, S3KV_SECRET_KEY=SECRET)
        bucket = f"kvcmp-{uuid.uuid4().hex[:8]}"
        import boto3

        boto3.client("s3", **server.client_kwargs()).create_bucket(Bucket=bucket)
        port = free_port()
        log = tempfile.NamedTemporaryFile(prefix="kvcmp-gw-", suffix=".log", delete=False)  # noqa: SIM115
        gw = subprocess.Popen(
            [sys.executable, "-m", "s3kv.cli", "serve", "--listen", f"127.0.0.1:{port}",
             "--store", f"s3://{bucket}/gw?endpoint={server.url}", "--log-level", "warning",
             *args.gateway_args.split()], env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(300):
                if gw.poll() is not None:
                    raise SystemExit(f"gateway exited; see {log.name}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                        break
                except OSError:
                    time.sleep(0.1)
            reports = {
                "gateway": _bench(["--target", f"http://127.0.0.1:{port}", *args.bench], env),
                "s3-per-block": _bench(
                    ["--target", f"s3://{bucket}/plain?endpoint={server.url}", *args.bench], env),
            }
        finally:
            gw.terminate()
            gw.wait(60)
            log.close()
            print(f"gateway log: {log.name}", file=sys.stderr)
    print(f"server: {server.name}; gateway: {args.gateway_args}")
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
    if args.json:
        Path(args.json).write_text(json.dumps({"server": server.name, **reports}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
