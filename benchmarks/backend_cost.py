"""Backend cost per GiB: what one object per block costs the S3 server, and what s3kv's packing
costs it, at 256 KiB, 2 MiB and 16 MiB blocks, in one run.

For each block size the same blocks (``--volume`` per size) are PUT at concurrency 8 by the same
client (aiobotocore, as benchmarks/gateway.py) straight to the server, one object per block,
and through the gateway's S3 front (a ``s3kv serve`` subprocess on that server, 256 MiB segments
in 16 MiB parts, the DRAM tier off; the phase ends with ``POST /v1/flush`` so every byte is on
the server). Per GiB of blocks written, for each side:

- ``server_cpu_s``: CPU-seconds of the server's processes, summed (RGW: radosgw + OSD + mon);
  ``cpu_s`` has every process group (client, gateway, each server process);
- ``requests``: HTTP requests radosgw counted (its perf counter ``req``; RGW only);
- ``objects``: objects created (listed in the bucket afterwards: direct, the blocks; gateway,
  segments and manifest sidecars);
- ``bytes_written``: PUT body bytes radosgw received (footers and sidecars included);
- ``free_requests`` / ``free_server_cpu_s``: the cost to free 1 GiB: DeleteObjects requests of
  up to 1000 keys for the blocks (direct) against whole-segment deletes (the gateway's segment
  and sidecar objects, deleted in one DeleteObjects per 1000 keys, as its eviction deletes
  them: here sent by this script straight to the backend bucket after the gateway stopped);
  requests as radosgw counts them, on other servers the DeleteObjects requests sent.
  RGW frees the data later in its garbage collector, which neither side's figure includes.

``*_ratio_*`` keys are the gateway's figure over direct's. Figures are for this machine as it
was (noisy when shared): CPU per GiB per process is the robust one.

    python benchmarks/backend_cost.py --split-cores --json
    python benchmarks/backend_cost.py --server moto --quick --json   # tiny (CI smoke)
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiobotocore.session import get_session

from benchmarks.gateway import (
    FULL,
    QUICK,
    Profile,
    gateway_client_kwargs,
    gateway_flush,
    gateway_process,
)
from benchmarks.harness import (
    BenchServer,
    CPUMeter,
    GiB,
    Progress,
    S3Side,
    add_arguments,
    gateway_pid,
    payloads,
    per_gib,
    server_counters,
    settle_disk,
)
from benchmarks.runner import run_on_server
from benchmarks.s3_clients import BotoBlocks, client_config
from s3kv.sizes import MiB, format_size, parse_size

SIZES = (256 * 1024, 2 * MiB, 16 * MiB)
CONCURRENCY = 8


def tag(size: int) -> str:
    return f"{size // 1024}KiB" if size < MiB else f"{size // MiB}MiB"


class Costs:
    """Samples CPU per process and the server's counters around one phase."""

    def __init__(self, server: BenchServer, meter: CPUMeter) -> None:
        self.server, self.meter = server, meter

    def sample(self) -> dict[str, Any]:
        return {"cpu": self.meter.sample(), "counters": server_counters(self.server)}

    def between(self, before: dict[str, Any], after: dict[str, Any], nbytes: int,
                prefix: str = "") -> dict[str, Any]:
        cpu = per_gib(self.meter.delta(before["cpu"], after["cpu"]), nbytes)
        out: dict[str, Any] = {f"{prefix}server_cpu_s": cpu["server"]}
        if not prefix:
            out["cpu_s"] = cpu
        c0, c1 = before["counters"], after["counters"]
        if c0 is None or c1 is None:
            out[f"{prefix}requests"] = None
            if not prefix:
                out["bytes_written"] = None
        else:
            out[f"{prefix}requests"] = round((c1["req"] - c0["req"]) * GiB / nbytes, 2)
            if not prefix:
                out["bytes_written"] = round((c1["put_b"] - c0["put_b"]) * GiB / nbytes)
        return out


async def _list_keys(client: Any, bucket: str, prefix: str = "") -> list[str]:
    keys: list[str] = []
    paginator = client.get_paginator("list_objects_v2")
    async for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


async def _delete_all(client: Any, bucket: str, keys: list[str]) -> int:
    """DeleteObjects of up to 1000 keys each; the number of requests sent."""
    sent = 0
    for i in range(0, len(keys), 1000):
        await client.delete_objects(Bucket=bucket, Delete={
            "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})
        sent += 1
    return sent


async def one_size(server: BenchServer, profile: Profile, size: int, volume: int,
                   say: Progress) -> dict[str, Any]:
    """Both sides at one block size, each on fresh buckets and a fresh gateway."""
    n = max(1, volume // size)
    total = n * size
    blocks = payloads(n, size)
    keys = [f"b/{i:06d}" for i in range(n)]
    session = get_session()
    out: dict[str, Any] = {"blocks": n, "block_bytes": size}
    direct_bucket = f"cost-direct-{uuid.uuid4().hex[:8]}"
    gw_backend = f"cost-gw-{uuid.uuid4().hex[:8]}"
    cfg = client_config(CONCURRENCY, "signed")
    async with session.create_client("s3", config=cfg, **server.client_kwargs()) as dc:
        await dc.create_bucket(Bucket=direct_bucket)
        await dc.create_bucket(Bucket=gw_backend)
        max_block = max(2 * MiB, 2 * size)
        with gateway_process(server, gw_backend, profile, max_block) as gw_url:
            costs = Costs(server, CPUMeter.for_run(server, gateway=gateway_pid()))
            async with session.create_client("s3", config=cfg,
                                             **gateway_client_kwargs(server, gw_url)) as gwc:
                await gwc.create_bucket(Bucket="cost")
                sides = {"direct": S3Side("direct", BotoBlocks(dc), direct_bucket),
                         "gateway": S3Side("gateway", BotoBlocks(gwc), "cost",
                                           gateway_flush(gw_url))}
                buckets = {"direct": direct_bucket, "gateway": gw_backend}
                for name, side in sides.items():
                    side.sample = costs.sample
                    objects0 = len(await _list_keys(dc, buckets[name]))
                    await side.put_all(keys, blocks, CONCURRENCY)
                    assert side.last_put is not None
                    got = costs.between(*side.last_put, total)
                    objects1 = len(await _list_keys(dc, buckets[name]))
                    got["objects"] = round((objects1 - objects0) * GiB / total, 2)
                    out[name] = got
        # the cost to free what was written: the blocks (direct), the whole segments and
        # their sidecars (the gateway's objects, with the gateway stopped)
        for name, bucket in (("direct", direct_bucket), ("gateway", gw_backend)):
            doomed = await _list_keys(dc, bucket)
            await settle_disk()
            before = costs.sample()
            sent = await _delete_all(dc, bucket, doomed)
            out[name].update(costs.between(before, costs.sample(), total, prefix="free_"))
            if out[name]["free_requests"] is None:
                out[name]["free_requests"] = round(sent * GiB / total, 2)
            out[name]["free_objects"] = round(len(doomed) * GiB / total, 2)
    for key in ("server_cpu_s", "requests", "objects", "bytes_written", "free_requests",
                "free_server_cpu_s"):
        g, d = out["gateway"][key], out["direct"][key]
        out[f"{key}_ratio"] = round(g / d, 4) if g is not None and d else None
    say(f"  {tag(size)}: server CPU-s/GiB direct {out['direct']['server_cpu_s']} vs gateway "
        f"{out['gateway']['server_cpu_s']}; requests/GiB {out['direct']['requests']} vs "
        f"{out['gateway']['requests']}; objects/GiB {out['direct']['objects']} vs "
        f"{out['gateway']['objects']}; free requests/GiB {out['direct']['free_requests']} vs "
        f"{out['gateway']['free_requests']}")
    return out


async def run(server: BenchServer, profile: Profile, volume: int, say: Progress,
              topology: dict[str, Any]) -> dict[str, Any]:
    say(f"server: {server.name} at {server.url}; {format_size(volume)} per size")
    results: dict[str, Any] = {"server": server.name, "segment_size": profile.segment_size,
                               "part_size": profile.part_size, "volume_per_size": volume,
                               "concurrency": CONCURRENCY, **topology}
    for size in SIZES:
        got = await one_size(server, profile, size, volume, say)
        results[tag(size)] = got
        for key in ("server_cpu_s_ratio", "requests_ratio", "objects_ratio",
                    "free_requests_ratio"):
            results[f"{key}_{tag(size)}"] = got[key]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--quick", action="store_true",
                        help="tiny profile (16 MiB segments, a few blocks; CI smoke on moto)")
    parser.add_argument("--volume", metavar="SIZE", default=None,
                        help="block bytes written per block size and side [default: 512MiB; "
                        "--quick 32MiB]")
    args = parser.parse_args(argv)
    # --quick: segments large enough for two 16 MiB blocks
    profile = replace(QUICK, segment_size="64MiB") if args.quick else FULL
    volume = parse_size(args.volume) if args.volume else (32 * MiB if args.quick else 512 * MiB)
    say = Progress(not args.json)
    results = run_on_server(args, lambda server, topology: run(server, profile, volume, say,
                                                               topology))
    if results is None:
        return 1
    if args.json:
        print(json.dumps(results, sort_keys=True))
    else:
        print(f"\nserver: {results['server']}; split cores: {results['split_cores']}")
        print("per GiB written      direct   gateway   ratio")
        for size in SIZES:
            got = results[tag(size)]
            for key in ("server_cpu_s", "requests", "objects", "bytes_written",
                        "free_requests", "free_server_cpu_s"):
                d, g, r = got["direct"][key], got["gateway"][key], got[f"{key}_ratio"]
                print(f"  {tag(size):>6} {key:18s} {d!s:>10} {g!s:>10} {r!s:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
