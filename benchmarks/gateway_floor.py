"""Gateway floor benchmark: 256 KiB PUTs from one S3 client to the S3 server directly, to a bare
aiohttp body sink, and to the gateway, in one run.

The sink (benchmarks/aiohttp_sink.py) reads each body, hashes it if the payload is signed and
answers: the least any aiohttp S3 front does. Its ratio to direct PUTs is therefore the ceiling
of the gateway's PUT ratio on this machine with this client, whatever the gateway does behind
its front; the gateway's ratio to the sink says how much of that ceiling it keeps. Each
process's CPU per PUT (psutil) is printed beside the throughputs.

The gateway's time includes the flush that makes its last segment durable, as in
benchmarks/gateway.py. Compare ratios, not absolute figures: this machine is shared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil
from aiobotocore.session import get_session

from benchmarks.aiohttp_sink import sink_process
from benchmarks.gateway import (
    FULL,
    QUICK,
    gateway_client_kwargs,
    gateway_flush,
    gateway_process,
)
from benchmarks.harness import (
    BenchServer,
    Progress,
    S3Side,
    add_arguments,
    payloads,
    settle_disk,
)
from benchmarks.runner import run_on_server
from benchmarks.s3_clients import BotoBlocks, client_config

KiB = 1024
BLOCK = 256 * KiB
#: the processes that work for each side's PUTs (their CPU per PUT is reported)
INVOLVED = {"direct": ("client", "server"), "sink": ("client", "sink"),
            "gateway": ("client", "gateway", "server")}


def _keys(n: int, tag: str) -> list[str]:
    return [f"{tag}/{i:06d}" for i in range(n)]


def _cpu(procs: dict[str, list[psutil.Process]]) -> dict[str, float]:
    """CPU-seconds per name, summed over its processes (the server: all of them, e.g. RGW's
    radosgw, OSD and mon)."""
    out = {}
    for name, group in procs.items():
        out[name] = 0.0
        for p in group:
            try:
                t = p.cpu_times()
                out[name] += t.user + t.system
            except psutil.Error:
                pass
    return out


async def run(server: BenchServer, args: argparse.Namespace, say: Progress,
              topology: dict[str, Any]) -> dict[str, Any]:
    profile = QUICK if args.quick else FULL
    profile = replace(profile, segment_size=args.segment_size or profile.segment_size,
                      part_size=args.part_size or profile.part_size)
    n = args.blocks or (64 if args.quick else 1536)
    blocks = payloads(n, BLOCK)
    session = get_session()
    backend_bucket, direct_bucket = (f"floor-{uuid.uuid4().hex[:8]}",
                                     f"direct-{uuid.uuid4().hex[:8]}")
    async with session.create_client("s3", config=client_config(8),
                                     **server.client_kwargs()) as admin:
        await admin.create_bucket(Bucket=backend_bucket)
        await admin.create_bucket(Bucket=direct_bucket)
    results: dict[str, Any] = {"server": server.name, "blocks": n, "block_bytes": BLOCK,
                               "segment_size": profile.segment_size,
                               "part_size": profile.part_size, "repeats": args.repeats,
                               **topology}
    with sink_process() as (sink_url, sink_pid), \
            gateway_process(server, backend_bucket, profile, 2 * BLOCK) as gw_url:
        me = psutil.Process()
        gw_pid = next(c.pid for c in me.children() if "s3kv.cli" in c.cmdline())
        procs = {"client": [me], "sink": [psutil.Process(sink_pid)], "gateway":
                 [psutil.Process(gw_pid)]}
        if server.pids:
            procs["server"] = [psutil.Process(pid) for pid in server.pids]
        gw_kwargs = gateway_client_kwargs(server, gw_url)
        sink_kwargs = {**gw_kwargs, "endpoint_url": sink_url}
        cfg = client_config(8)
        async with session.create_client("s3", config=cfg, **server.client_kwargs()) as dc, \
                session.create_client("s3", config=cfg, **sink_kwargs) as sc, \
                session.create_client("s3", config=cfg, **gw_kwargs) as gc:
            await gc.create_bucket(Bucket="floor")
            sides = [S3Side("direct", BotoBlocks(dc), direct_bucket),
                     S3Side("sink", BotoBlocks(sc), "floor"),
                     S3Side("gateway", BotoBlocks(gc), "floor", gateway_flush(gw_url))]
            say(f"warm-up (untimed): {min(n, 512)} PUTs per side")
            for side in sides:
                warm = min(n, 512)
                await side.put_all(_keys(warm, "warm"), blocks[:warm], 8)
            rows: dict[str, list[float]] = {}
            for r in range(args.repeats):
                for c in args.concurrency:
                    for side in sides:
                        keys = _keys(n, f"r{r}c{c}-{uuid.uuid4().hex[:6]}")
                        await settle_disk()  # before the CPU sample: put_all's own
                        before = _cpu(procs)  # settle then finds nothing to write back
                        seconds = await side.put_all(keys, blocks, c)
                        after = _cpu(procs)
                        mib_s = n * BLOCK / (1 << 20) / seconds
                        rows.setdefault(f"{side.name}_MiBps_c{c}", []).append(round(mib_s, 1))
                        for name in INVOLVED[side.name]:
                            if name not in procs:
                                continue
                            rows.setdefault(f"{side.name}_cpu_ms_per_put_{name}_c{c}", []).append(
                                round((after[name] - before[name]) * 1000 / n, 2))
                        say(f"  repeat {r + 1} c={c} {side.name:8s} {mib_s:6.1f} MiB/s")
                    d, s, g = (rows[f"{k}_MiBps_c{c}"][-1] for k in ("direct", "sink", "gateway"))
                    for key, value in (("floor_ratio", s / d), ("gateway_ratio", g / d),
                                       ("gateway_vs_floor", g / s)):
                        rows.setdefault(f"{key}_c{c}", []).append(round(value, 3))
    for key, values in rows.items():
        results[key] = statistics.median(values)
        if args.repeats > 1 and ("ratio" in key or "_vs_" in key):
            results[f"{key}_repeats"] = values
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--quick", action="store_true",
                        help="64 PUTs per run and the gateway's small layout (CI smoke runs)")
    parser.add_argument("--blocks", type=int, default=0, metavar="N",
                        help="256 KiB PUTs per side per run [default: 1536, --quick 64]")
    parser.add_argument("--concurrency", default="1,8", metavar="LIST",
                        help="comma-separated client concurrencies [default: 1,8]")
    parser.add_argument("--repeats", type=int, default=3, metavar="N",
                        help="runs per concurrency and side, interleaved; figures are medians "
                        "[default: 3]")
    parser.add_argument("--segment-size", default=None, metavar="SIZE",
                        help=f"the gateway's segment size [default: {FULL.segment_size}]")
    parser.add_argument("--part-size", default=None, metavar="SIZE",
                        help=f"the gateway's part size [default: {FULL.part_size}]")
    args = parser.parse_args(argv)
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    except ValueError:
        parser.error("--concurrency takes integers, e.g. 1,8")
    if args.repeats < 1 or args.blocks < 0 or not args.concurrency or min(args.concurrency) < 1:
        parser.error("--repeats, --blocks and --concurrency must be positive")
    say = Progress(not args.json)
    results = run_on_server(args, lambda server, topology: run(server, args, say, topology))
    if results is None:
        return 1
    if args.json:
        print(json.dumps(results, sort_keys=True))
        return 0
    print(f"\n256 KiB PUTs on {results['server']}, medians of {args.repeats}")
    for c in args.concurrency:
        print(f"  c={c}: direct {results[f'direct_MiBps_c{c}']:6.1f}  sink "
              f"{results[f'sink_MiBps_c{c}']:6.1f}  gateway {results[f'gateway_MiBps_c{c}']:6.1f}"
              f" MiB/s | sink/direct {results[f'floor_ratio_c{c}']:.2f} (the ceiling), "
              f"gateway/direct {results[f'gateway_ratio_c{c}']:.2f}, gateway/sink "
              f"{results[f'gateway_vs_floor_c{c}']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
