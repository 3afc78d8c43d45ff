"""How close the load generator gets to a raw aiohttp client, and its memory at Warp's profile.

One run on loopback:

- minimal S3-ish endpoints (aiohttp, one process each) that discard PUT bodies (single and
  multipart) and serve GETs from memory, with exactly the bytes the generator wrote, so the
  generator's GETs verify;
- a raw aiohttp client (no signing, no records, no verification; PUT bodies streamed as 4 MiB
  views of one buffer, GET bodies read and dropped) and the generator
  (``warp.runner.run_client``: SigV4, records, checksums), each its own process, at the same
  concurrency and object size.

By default the two clients run at the same time, each against its own endpoint, so that both
see the same machine (this 2-core machine is shared with other jobs, and one-after-the-other
runs swing by 5x with their load); ``--sequential`` runs them one after the other instead.
``put_ratio`` / ``get_ratio`` = median over ``--rounds`` of generator bytes / raw bytes in the
same round. The detail also gives each client's bytes per CPU-second of its own process (the
throughput it would reach alone on one core), which load on the machine hardly disturbs.
Peak RSS = ``ru_maxrss`` of one generator process running PUT (multipart, 16 MiB parts, 4 in
flight per object) and then GET at 256 MiB objects x 32 connections.

    python benchmarks/generator_ceiling.py --json
    -> {"put_ratio": ..., "get_ratio": ..., "client_peak_rss_mib": ..., "detail": {...}}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from s3kv.sizes import MiB, parse_size  # noqa: E402
from warp.config import DEFAULT_SEED, BenchConfig  # noqa: E402
from warp.payload import PayloadSource, variant_of  # noqa: E402

BUCKET = "ceiling"


# ---- the minimal endpoint -----------------------------------------------------------------
def serve(port: int, size: int) -> None:
    payload = PayloadSource(DEFAULT_SEED, slice_size=4 * MiB)

    async def handle(request: web.Request) -> web.StreamResponse:
        q = request.query
        if request.method == "PUT":
            async for _ in request.content.iter_any():
                pass
            return web.Response(headers={"ETag": '"0"'})
        if request.method == "POST" and "uploads" in q:
            return web.Response(text="<InitiateMultipartUploadResult><UploadId>u1</UploadId>"
                                     "</InitiateMultipartUploadResult>")
        if request.method == "POST":
            await request.read()
            body = ("<DeleteResult/>" if "delete" in q else
                    "<CompleteMultipartUploadResult><ETag>\"0\"</ETag>"
                    "</CompleteMultipartUploadResult>")
            return web.Response(text=body)
        if request.method == "DELETE":
            return web.Response(status=204)
        key = request.path.split("/", 2)[2] if request.path.count("/") >= 2 else ""
        if not key:
            return web.Response(text="<ListBucketResult><KeyCount>0</KeyCount>"
                                     "</ListBucketResult>")
        resp = web.StreamResponse(headers={"Content-Length": str(size)})
        await resp.prepare(request)
        for view in payload.slices(variant_of(key), 0, size):
            await resp.write(view)
        return resp

    import logging

    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)  # resets at run end are expected
    app = web.Application(client_max_size=1 << 40)
    app.router.add_route("*", "/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# ---- clients (each run in its own process) -----------------------------------------------
async def raw_client(endpoint: str, op: str, size: int, conc: int, duration: float) -> int:
    buf = memoryview(PayloadSource(DEFAULT_SEED, slice_size=4 * MiB).slices(0, 0, 4 * MiB)
                     .__next__().tobytes())
    done = 0

    async def body() -> Any:
        left = size
        while left:
            n = min(left, len(buf))
            yield buf[:n]
            left -= n

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc),
                                     auto_decompress=False, read_bufsize=1 << 20) as s:
        async def worker(i: int) -> None:
            nonlocal done
            seq = 0
            while True:
                seq += 1
                url = f"{endpoint}/{BUCKET}/raw/{i}/{seq}"
                if op == "put":
                    async with s.put(url, data=body(),
                                     headers={"Content-Length": str(size)}) as r:
                        await r.read()
                else:
                    async with s.get(url) as r:
                        async for _ in r.content.iter_any():
                            pass
                done += size

        tasks = [asyncio.create_task(worker(i)) for i in range(conc)]
        await asyncio.sleep(duration)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return done


async def generator_client(endpoint: str, op: str, size: int, conc: int, duration: float,
                           multipart: bool) -> tuple[int, int]:
    from s3kv.wire.sigv4 import Credentials
    from warp.benchmarks import load
    from warp.runner import run_client

    cfg = BenchConfig(op=op, endpoints=(endpoint,), bucket=BUCKET, obj_size=size,
                      concurrent=conc, duration=duration, objects=64, prepared=True,
                      cleanup=False, disable_multipart=not multipart, part_size=16 * MiB)
    with tempfile.TemporaryDirectory() as tmp:
        res = await run_client(cfg, load(op), Path(tmp) / "r.csv.zst", handle_sigint=False,
                               creds=Credentials("ceiling", "ceiling"))
    return res.stats.bytes, res.stats.errors


def child(args: argparse.Namespace) -> None:
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage0.ru_utime + usage0.ru_stime  # start-up (imports) excluded
    t0 = time.perf_counter()
    errors = 0
    if args.child == "raw":
        n = asyncio.run(raw_client(args.endpoint, args.op, args.size, args.conc, args.duration))
    else:
        n, errors = asyncio.run(generator_client(args.endpoint, args.op, args.size, args.conc,
                                                 args.duration, args.multipart))
    elapsed = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"bytes": n, "seconds": args.duration, "elapsed": elapsed,
                      "cpu_s": usage.ru_utime + usage.ru_stime - cpu0,
                      "errors": errors,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


# ---- orchestration ------------------------------------------------------------------------
def _child_cmd(kind: str, endpoint: str, op: str, size: int, conc: int, duration: float,
               multipart: bool = False) -> list[str]:
    cmd = [sys.executable, __file__, "--child", kind, "--endpoint", endpoint, "--op", op,
           "--size", str(size), "--conc", str(conc), "--duration", str(duration)]
    return cmd + (["--multipart"] if multipart else [])


def _run_children(cmds: list[list[str]]) -> list[dict[str, Any]]:
    """Run the commands at the same time; their last stdout lines, parsed."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True, cwd=ROOT) for c in cmds]
    out = []
    for p in procs:
        stdout, _ = p.communicate()
        if p.returncode:
            raise RuntimeError(f"client failed ({p.returncode})")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def _start_server(size: int) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(size)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(endpoint + f"/{BUCKET}", timeout=1).read()
            return proc, endpoint
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("endpoint did not start")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    size, conc, dur = args.obj_size, args.concurrent, args.duration
    kinds = ("raw", "gen")
    rates: dict[str, list[float]] = {f"{k}_{op}": [] for op in ("put", "get") for k in kinds}
    per_cpu: dict[str, list[float]] = {k: [] for k in rates}
    ratios: dict[str, list[float]] = {"put": [], "get": []}
    errors = 0
    servers = [_start_server(size) for _ in kinds]  # one endpoint per client
    try:
        for i in range(args.rounds):
            for op in ("put", "get"):
                if args.sequential:  # one client at a time; who goes first alternates
                    order = kinds if i % 2 == 0 else kinds[::-1]
                    got = {k: _run_children([_child_cmd(k, servers[0][1], op, size, conc,
                                                        dur)])[0] for k in order}
                else:  # both at once, each against its own endpoint, sharing the machine
                    both = _run_children([_child_cmd(k, servers[j][1], op, size, conc, dur)
                                          for j, k in enumerate(kinds)])
                    got = dict(zip(kinds, both, strict=True))
                for k, r in got.items():
                    errors += r["errors"]
                    rates[f"{k}_{op}"].append(r["bytes"] / r["seconds"])
                    per_cpu[f"{k}_{op}"].append(r["bytes"] / max(r["cpu_s"], 1e-9))
                ratios[op].append(got["gen"]["bytes"] / max(got["raw"]["bytes"], 1))
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait()
    proc, endpoint = _start_server(args.rss_size)
    try:
        rss = [_run_children([_child_cmd("gen", endpoint, op, args.rss_size,
                                         args.rss_concurrent, args.rss_duration,
                                         multipart=True)])[0] for op in ("put", "get")]
    finally:
        proc.terminate()
        proc.wait()
    cpu = {k: statistics.median(v) for k, v in per_cpu.items()}
    return {
        "put_ratio": round(statistics.median(ratios["put"]), 3),
        "get_ratio": round(statistics.median(ratios["get"]), 3),
        "client_peak_rss_mib": round(max(r["peak_rss_mib"] for r in rss), 1),
        "detail": {
            "mode": "sequential" if args.sequential else "paired (both clients at once)",
            "obj_size": size, "concurrent": conc, "duration_s": dur, "rounds": args.rounds,
            "ratio_per_round": {k: [round(x, 3) for x in v] for k, v in ratios.items()},
            "gib_s": {k: [round(x / 2**30, 3) for x in v] for k, v in rates.items()},
            "gib_per_client_cpu_s": {k: round(v / 2**30, 3) for k, v in cpu.items()},
            "put_cpu_ratio": round(cpu["gen_put"] / cpu["raw_put"], 3),
            "get_cpu_ratio": round(cpu["gen_get"] / cpu["raw_get"], 3),
            "generator_errors": errors + sum(r["errors"] for r in rss),
            "rss_run": {"obj_size": args.rss_size, "concurrent": args.rss_concurrent,
                        "duration_s": args.rss_duration,
                        "put_gib_s": round(rss[0]["bytes"] / rss[0]["seconds"] / 2**30, 3),
                        "get_gib_s": round(rss[1]["bytes"] / rss[1]["seconds"] / 2**30, 3),
                        "peak_rss_mib": [round(r["peak_rss_mib"], 1) for r in rss]},
            "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--obj-size", type=parse_size, default=8 * MiB)
    p.add_argument("--concurrent", type=int, default=16)
    p.add_argument("--duration", type=float, default=6.0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sequential", action="store_true",
                   help="run the raw and the generator client one after the other instead of "
                        "at the same time (each against its own endpoint)")
    p.add_argument("--rss-size", type=parse_size, default=256 * MiB)
    p.add_argument("--rss-concurrent", type=int, default=32)
    p.add_argument("--rss-duration", type=float, default=30.0)
    # internal modes
    p.add_argument("--serve", nargs=2, type=int, metavar=("PORT", "SIZE"), help=argparse.SUPPRESS)
    p.add_argument("--child", choices=("raw", "gen"), help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--op", help=argparse.SUPPRESS)
    p.add_argument("--size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--conc", type=int, help=argparse.SUPPRESS)
    p.add_argument("--multipart", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    if args.child:
        child(args)
        return
    result = measure(args)
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
