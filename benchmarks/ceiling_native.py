"""Native batch load generator: batch puts or streamed batch gets through s3kv/client.py.

The native counterpart of ``s3kv bench put|get`` for benchmarks/gateway_ceiling.py, against the
gateway's /v1 API or the bare server's (benchmarks/aiohttp_sink.py). ``--concurrent`` workers
each send one request of ``--batch`` blocks at a time until ``--duration`` has passed (the
request in flight then completes and counts). Every block's bytes are the window of
warp/payload.py's seeded buffer that ``s3kv bench`` would write under the same key, so the bare
server can serve them from memory; every block read back is compared with them.

``get`` first stores a set of ``--set-blocks`` blocks (untimed), then asks for random batches of
it. The result is one JSON object on stdout shaped like ``s3kv bench --json``'s:
``{"operations": [{"op", "ops", "errors", "verify_failures", "first_error", "requests",
"run_start_ns", "run_end_ns", "run_bytes"}]}`` (ops are blocks, times are s3kv/clock.py's).

    python -m benchmarks.ceiling_native --url http://127.0.0.1:9470 --op put --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from s3kv.client import S3KVClient
from s3kv.clock import now_ns
from s3kv.errors import S3KVError
from s3kv.sizes import parse_size
from warp.config import DEFAULT_SEED
from warp.payload import VARIANTS, PayloadSource, variant_of

NAMESPACE = "ceiling"


@dataclass
class Tally:
    op: str
    ops: int = 0
    requests: int = 0
    errors: int = 0
    verify_failures: int = 0
    first_error: str = ""
    run_bytes: int = 0
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    def failed(self, what: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or what

    def report(self) -> dict[str, Any]:
        return {"op": self.op, "ops": self.ops, "requests": self.requests,
                "errors": self.errors, "verify_failures": self.verify_failures,
                "first_error": self.first_error, "run_bytes": self.run_bytes,
                "run_start_ns": min(self.starts, default=0),
                "run_end_ns": max(self.ends, default=0)}


class Blocks:
    """Each key's block: the payload window of its variant, one bytes object per variant."""

    def __init__(self, size: int) -> None:
        src = PayloadSource(DEFAULT_SEED)
        self.size = size
        self.by_variant = [b"".join(src.slices(v, 0, size)) for v in range(VARIANTS)]

    def of(self, key: str) -> bytes:
        return self.by_variant[variant_of(key)]


async def put_batch(kv: S3KVClient, blocks: Blocks, keys: list[str], tally: Tally) -> None:
    tally.starts.append(now_ns())
    try:
        stored = await kv.put_many(NAMESPACE, [(k, blocks.of(k)) for k in keys])
    except S3KVError as exc:
        tally.failed(f"{type(exc).__name__}: {exc}")
        return
    tally.ends.append(now_ns())
    tally.requests += 1
    tally.ops += stored
    tally.run_bytes += stored * blocks.size


async def get_batch(kv: S3KVClient, blocks: Blocks, keys: list[str], tally: Tally) -> None:
    tally.starts.append(now_ns())
    try:
        async for key, data in kv.iter_many(NAMESPACE, keys):
            if data is None:
                tally.failed(f"missing block {key}")
            elif data != blocks.of(key):
                tally.verify_failures += 1
                tally.failed(f"verify: block {key} read back wrong")
            else:
                tally.ops += 1
                tally.run_bytes += len(data)
    except S3KVError as exc:
        tally.failed(f"{type(exc).__name__}: {exc}")
        return
    tally.ends.append(now_ns())
    tally.requests += 1


async def run(args: argparse.Namespace) -> Tally:
    blocks = Blocks(args.block_size)
    run_id = uuid.uuid4().hex[:8]
    async with S3KVClient(args.url, token=args.token or None,
                          connections=args.concurrent + 2) as kv:
        await kv.create_namespace(NAMESPACE)
        pool: list[str] = []
        if args.op == "get":
            pool = [f"{run_id}/set/{i:06d}" for i in range(max(args.set_blocks, args.batch))]
            for i in range(0, len(pool), args.batch * args.concurrent):
                part = pool[i:i + args.batch * args.concurrent]
                await asyncio.gather(*(kv.put_many(NAMESPACE, [(k, blocks.of(k)) for k in
                                                               part[j:j + args.batch]])
                                       for j in range(0, len(part), args.batch)))
        tally = Tally(args.op.upper())
        deadline = time.monotonic() + args.duration
        rng = random.Random()

        async def worker(w: int) -> None:
            seq = 0
            while time.monotonic() < deadline and not tally.errors:
                if args.op == "put":
                    keys = [f"{run_id}/w{w}/{seq:08d}/{i:03d}" for i in range(args.batch)]
                    await put_batch(kv, blocks, keys, tally)
                else:
                    await get_batch(kv, blocks, rng.sample(pool, args.batch), tally)
                seq += 1

        await asyncio.gather(*(worker(w) for w in range(args.concurrent)))
    return tally


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the gateway's (or bare server's) base URL")
    p.add_argument("--token", default="", help="ACCESS:SECRET for the gateway's front "
                   "[default: none, anonymous]")
    p.add_argument("--op", choices=("put", "get"), required=True,
                   help="batch puts, or streamed batch gets of a stored set")
    p.add_argument("--block-size", type=parse_size, default=parse_size("256KiB"),
                   metavar="SIZE", help="bytes per block [default: 256KiB]")
    p.add_argument("--batch", type=int, default=64, metavar="N",
                   help="blocks per request [default: 64]")
    p.add_argument("--concurrent", type=int, default=4, metavar="N",
                   help="requests in flight [default: 4]")
    p.add_argument("--duration", type=float, default=10.0, metavar="SECONDS",
                   help="seconds of requests [default: 10]")
    p.add_argument("--set-blocks", type=int, default=1024, metavar="N",
                   help="blocks stored before a get run, which it reads [default: 1024]")
    args = p.parse_args(argv)
    if min(args.batch, args.concurrent, args.block_size) < 1 or args.duration <= 0:
        p.error("--batch, --concurrent, --block-size and --duration must be positive")
    tally = asyncio.run(run(args))
    print(json.dumps({"operations": [tally.report()]}))
    return 1 if tally.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
