"""Gateway benchmark: the gateway's S3 front against one object per block, in one run.

Measured side by side against the same S3 server (s3rver by default; ``--server moto``, or
``--endpoint URL`` for a running one), with the same client on both sides (aiobotocore, SigV4,
path-style, one connection per concurrent request):

- block PUT and GET throughput through the gateway's S3 front (a ``s3kv serve`` subprocess on
  an ``s3://`` store on that server) against the same client writing one object per block
  straight to the server, for 256 KiB and 2 MiB blocks at concurrency 1 and 8. The gateway's
  timed PUT phase ends with ``POST /v1/flush``, so every byte is on the server when the clock
  stops; its GETs are served from the server (the DRAM tier is off);
- the time to restore a 10K-token session (Qwen2.5-7B geometry: 56 KiB per token, 16-token
  blocks of 896 KiB, 625 blocks) as a prefix chain: one native prefix lookup plus streamed
  native batch gets (``S3KVClient.iter_many``, ``--restore-batch`` keys per request, by default
  the whole chain in one; every block is checked as it arrives and dropped, as the per-block
  side does) against per-block GETs
  of one object per block at concurrency 8 (and, for reference, per-block GETs through the
  gateway's S3 front at concurrency 8).

Every byte read back is compared with what was written. Ratios are gateway / direct (for the
restore: per-block time / batch time); compare ratios between versions of our code, not the
absolute MiB/s of a local server (DESIGN.md, "Testing").

    python benchmarks/gateway.py                       # s3rver, text report
    python benchmarks/gateway.py --json                # one JSON object on stdout
    python benchmarks/gateway.py --server moto --quick --json    # tiny profile (CI smoke)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiobotocore.session import get_session
from botocore.config import Config

from benchmarks.gateway_phases import (
    BLOCK_TOKENS,
    GW_ACCESS,
    GW_SECRET,
    MODEL,
    SESSION_TOKENS,
    KiB,
    MiB,
    Progress,
    S3Side,
    restore,
    throughput,
    warm_up,
)
from benchmarks.servers import (
    BenchServer,
    ServerError,
    add_server_arguments,
    free_port,
    server_from_args,
)
from s3kv.client import S3KVClient
from s3kv.models import block_bytes, kv_bytes_per_token
from s3kv.sizes import format_size, parse_size

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Profile:
    volume: int  # block bytes per PUT/GET phase
    session_tokens: int
    segment_size: str
    part_size: str
    warm_requests: int  # untimed 256 KiB PUT+GET pairs per side before the first phase


#: 384 MiB per phase: the gateway's PUT phases end with a flush whose tail (the last part or
#: segment, and s3rver's Complete) is a fixed cost per phase; 128 MiB phases let it be a fifth
#: of the timed run, while a continuous write stream pays it never
FULL = Profile(volume=384 * MiB, session_tokens=SESSION_TOKENS, segment_size="256MiB",
               part_size="16MiB", warm_requests=1024)
QUICK = Profile(volume=4 * MiB, session_tokens=256, segment_size="16MiB", part_size="8MiB",
                warm_requests=16)


#: --payload unsigned: the client sends UNSIGNED-PAYLOAD and no CRC (as Warp's
#: --disable-sha256-payload and the gateway's own backend client do), so client hashing stops
#: dominating a 2-core machine; the default is botocore's own behaviour over plain HTTP
PAYLOAD_SIGNING = {"signed": True, "unsigned": False}


def client_config(concurrency: int, payload: str = "signed") -> Config:
    signed = PAYLOAD_SIGNING[payload]
    return Config(signature_version="s3v4",
                  s3={"addressing_style": "path", "payload_signing_enabled": signed},
                  request_checksum_calculation="when_supported" if signed else "when_required",
                  retries={"max_attempts": 1, "mode": "standard"},
                  max_pool_connections=max(concurrency, 10), tcp_keepalive=True)


# ---- the gateway process -------------------------------------------------------------------
@contextmanager
def gateway_process(server: BenchServer, bucket: str, profile: Profile,
                    max_block: int) -> Iterator[str]:
    """A ``s3kv serve`` subprocess on ``s3://bucket/gw`` of the server; yields its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.update(server.env())
    env["S3KV_ACCESS_KEY"] = GW_ACCESS
    env["S3KV_SECRET_KEY"] = GW_SECRET
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    argv = [sys.executable, "-m", "s3kv.cli", "serve", "--listen", f"127.0.0.1:{port}",
            "--store", f"s3://{bucket}/gw?endpoint={server.url}",
            "--segment-size", profile.segment_size, "--part-size", profile.part_size,
            "--max-block-size", str(max_block), "--log-level", "warning",
            "--sync-interval", "0", "--node-id", "bench"]
    log = tempfile.NamedTemporaryFile(prefix="bench-gateway-", suffix=".log",  # noqa: SIM115
                                      delete=False)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise ServerError(f"gateway exited at start; see {log.name}:\n"
                                  f"{Path(log.name).read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=1):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise ServerError(f"gateway not ready in 60 s; see {log.name}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)


async def run(server: BenchServer, profile: Profile, args: argparse.Namespace,
              say: Progress) -> dict[str, Any]:
    backend_bucket = f"gwbench-{uuid.uuid4().hex[:8]}"
    direct_bucket = f"direct-{uuid.uuid4().hex[:8]}"
    session = get_session()
    async with session.create_client("s3", config=client_config(8, args.payload),
                                     **server.client_kwargs()) as admin:
        await admin.create_bucket(Bucket=backend_bucket)
        await admin.create_bucket(Bucket=direct_bucket)
    max_block = max(2 * MiB, block_bytes(MODEL, BLOCK_TOKENS))
    results: dict[str, Any] = {"server": server.name, "model": MODEL,
                               "segment_size": profile.segment_size,
                               "part_size": profile.part_size,
                               "kv_bytes_per_token": kv_bytes_per_token(MODEL),
                               "profile": "quick" if args.quick else "full",
                               "payload": args.payload}
    with gateway_process(server, backend_bucket, profile, max_block) as gw_url:
        gw_kwargs = {"endpoint_url": gw_url, "region_name": server.region,
                     "aws_access_key_id": GW_ACCESS, "aws_secret_access_key": GW_SECRET}
        cfg = client_config(8, args.payload)
        async with session.create_client("s3", config=cfg, **gw_kwargs) as gwc, \
                session.create_client("s3", config=cfg, **server.client_kwargs()) as dc:
            ns = "bench"
            await gwc.create_bucket(Bucket=ns)

            async def flush() -> None:
                async with S3KVClient(gw_url, token=f"{GW_ACCESS}:{GW_SECRET}") as kv:
                    await kv.flush()

            gw = S3Side("gateway", gwc, ns, flush)
            direct = S3Side("direct", dc, direct_bucket)
            say("warm-up (untimed): 256 KiB PUTs and GETs on both sides, the gateway's flushed")
            await warm_up(gw, direct, profile.warm_requests, parse_size(profile.segment_size))
            rounds: list[dict[str, float]] = []
            for r in range(args.repeats):
                if args.repeats > 1:
                    say(f"repeat {r + 1} of {args.repeats}")
                one: dict[str, float] = {}
                for size in (256 * KiB, 2 * MiB):
                    n = max(1, profile.volume // size)
                    tag = "256KiB" if size < MiB else "2MiB"
                    for c in (1, 8):
                        got = await throughput(gw, direct, size, n, c, say)
                        one.update({f"{k}_{tag}_c{c}": v for k, v in got.items()})
                one.update(await restore(gw_url, gw, direct, profile.session_tokens,
                                         args.restore_batch, args.restore_concurrency, say))
                rounds.append(one)
            # every figure is the median over the repeats (each ratio's own median); the
            # repeats' values are kept beside it
            for key in rounds[0]:
                results[key] = statistics.median(one[key] for one in rounds)
            results["repeats"] = args.repeats
            if args.repeats > 1:
                results["per_repeat"] = {k: [one[k] for one in rounds] for k in SUMMARY_KEYS}
            results["gateway_put_slowdowns"] = gw.slowdowns
            results["direct_put_slowdowns"] = direct.slowdowns
    return results


SUMMARY_KEYS = ("put_ratio_256KiB_c1", "put_ratio_256KiB_c8", "get_ratio_2MiB_c1",
                "get_ratio_2MiB_c8", "restore_ratio")
TARGETS = {"put_ratio_256KiB_c1": 2.0, "put_ratio_256KiB_c8": 1.5, "get_ratio_2MiB_c1": 0.7,
           "get_ratio_2MiB_c8": 0.7, "restore_ratio": 2.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--quick", action="store_true",
                        help="tiny profile (a few MiB per phase; for CI smoke runs on moto)")
    parser.add_argument("--payload", choices=sorted(PAYLOAD_SIGNING), default="signed",
                        help="how the (same) S3 client on both sides treats bodies: signed = "
                        "SHA-256 payload signature and CRC32 checksum, botocore's default over "
                        "plain HTTP; unsigned = UNSIGNED-PAYLOAD, no checksum, like Warp's "
                        "--disable-sha256-payload [default: signed]")
    parser.add_argument("--restore-batch", type=int, default=SESSION_TOKENS // BLOCK_TOKENS,
                        metavar="N",
                        help="keys per native batch-get request [default: the whole chain, "
                        f"{SESSION_TOKENS // BLOCK_TOKENS} keys, in one streamed request]")
    parser.add_argument("--restore-concurrency", type=int, default=1, metavar="N",
                        help="batch-get requests in flight during the restore [default: 1]")
    parser.add_argument("--repeats", type=int, default=1, metavar="N",
                        help="run every phase N times (fresh keys each time, one gateway) and "
                        "report each figure's median, the per-repeat ratios beside them "
                        "[default: 1]")
    parser.add_argument("--volume", metavar="SIZE", default=None,
                        help=f"block bytes per PUT and GET phase [default: "
                        f"{format_size(FULL.volume)}; --quick {format_size(QUICK.volume)}]")
    parser.add_argument("--segment-size", metavar="SIZE", default=None,
                        help=f"the gateway's --segment-size [default: {FULL.segment_size}; "
                        f"--quick {QUICK.segment_size}]")
    parser.add_argument("--part-size", metavar="SIZE", default=None,
                        help=f"the gateway's --part-size; equal to the segment size, every "
                        f"segment is one PUT [default: {FULL.part_size}; --quick "
                        f"{QUICK.part_size}]")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    profile = QUICK if args.quick else FULL
    profile = replace(profile, segment_size=args.segment_size or profile.segment_size,
                      part_size=args.part_size or profile.part_size,
                      volume=parse_size(args.volume) if args.volume else profile.volume)
    say = Progress(not args.json)
    try:
        with server_from_args(args) as server:
            say(f"server: {server.name} at {server.url}")
            results = asyncio.run(run(server, profile, args, say))
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(results, sort_keys=True))
    else:
        print(f"\nserver: {results['server']} ({results['profile']} profile; segments "
              f"{results['segment_size']} in {results['part_size']} parts)")
        per = results.get("per_repeat", {})
        for key in SUMMARY_KEYS:
            ok = "ok" if results[key] >= TARGETS[key] else "below target"
            runs = f"  repeats: {', '.join(f'{v:.2f}' for v in per[key])}" if key in per else ""
            print(f"  {key:24s} {results[key]:6.2f}  (target >= {TARGETS[key]}: {ok}){runs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
