"""Gateway ceiling benchmark: the gateway's data path against a bare aiohttp server, same client.

Issue #17's measuring stick. One run interleaves, case by case, three sides that the same
client drives the same way (benchmarks/ceiling_runs.py):

- ``bare``: benchmarks/aiohttp_sink.py, the least an aiohttp S3 front can do (PUT streams the
  body in and drops it; GET writes the bytes the client verifies from memory; the native
  batch-put drops the blocks, batch-get streams them in the native framing);
- ``fast`` and ``md5``: ``s3kv serve --etag fast`` and ``--etag md5``, each on a ``file://``
  store in a fresh temporary directory of ``/dev/shm``, removed afterwards; ``--capacity``
  bounds what each store holds. Before the timed runs each gateway is filled (``--fill``,
  untimed) past its capacity, so it runs full as a cache tier does: every new segment is then
  written over a recycled file (s3kv/backends/recycle.py) and the backend costs about nothing.
  From an empty store every segment lands on newly allocated tmpfs pages, which on this VM
  costs 1-3.6 CPU-s per GiB by itself (``--fill 0`` measures that).

Cases: PUT and GET of each ``--sizes`` object through the S3 front (``s3kv bench put|get``:
UNSIGNED-PAYLOAD, ``--concurrent`` connections, one PUT per object, every GET verified), and
native batch put / streamed batch get (s3kv/client.py) of ``--batch-block`` blocks in batches of
``--batch``. Per case, each side first runs ``--warmup`` seconds untimed (a process's first
run of a case grows its memory to the case's request sizes), then each repeat runs bare, fast,
md5 in turn; ratios are gateway / bare
throughput within a repeat, and every figure is the median over ``--repeats``. Each process's
CPU (client, gateway, bare server; psutil, over the timed window only) is reported per GiB and
per op (an op is an object, or a block in the batch cases), with the gateway's peak RSS (which
counts the store's segment files it maps: they are in /dev/shm either way) and its largest
anonymous RSS (``peak_anon_MiB``: its own memory); the server's main thread, its event loop,
also on its own (``server_loop_cpu_...``: the rest of the server's CPU is its worker threads,
the gateway's file writes above all).

``--json`` prints one object: ``put_ratio_<size>``, ``get_ratio_<size>``,
``batch_put_ratio_<block>``, ``batch_get_ratio_<block>``, ``gateway_cpu_s_per_gib_put_<size>``
and ``gateway_cpu_ms_per_put_<size>`` for ``--etag fast``, the same keys suffixed ``_md5`` for
``--etag md5``, and ``detail`` (every side's medians and the per-repeat ratios, per case) and
``settings``. Compare ratios, not absolute figures: this machine is shared.

    python benchmarks/gateway_ceiling.py                  # 10 s per run, medians of 3
    python benchmarks/gateway_ceiling.py --quick --json   # about a minute
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.aiohttp_sink import sink_process
from benchmarks.ceiling_runs import BATCH_OPS, S3_OPS, Case, Load, Side, run_once
from benchmarks.gateway_phases import GW_ACCESS, GW_SECRET
from benchmarks.harness import Progress, ServerError, gateway_subprocess, medians
from s3kv.backends.recycle import RECYCLE_BYTES
from s3kv.client import S3KVClient
from s3kv.errors import Backpressure, ConfigError
from s3kv.sizes import MiB, format_size, parse_size

MODES = ("fast", "md5")
FILL_NAMESPACE = "ceiling-fill"  # the targets are for fast; md5 is reported beside it
DEFAULTS = {"duration": 10.0, "repeats": 3, "set_bytes": "512MiB", "warmup": 2.0}
QUICK = {"duration": 1.0, "repeats": 1, "set_bytes": "64MiB", "warmup": 0.0}


def cases(args: argparse.Namespace) -> list[Case]:
    return [*(Case(op, size) for size in args.sizes for op in S3_OPS),
            *(Case(op, args.batch_block) for op in BATCH_OPS)]


def segment_size(args: argparse.Namespace) -> int:
    """Segments hold at least two of the largest objects, in whole 16 MiB parts."""
    largest: int = max(*args.sizes, args.batch_block)
    return max(256 * MiB, -(-2 * largest // (16 * MiB)) * 16 * MiB)


def gateway_args(args: argparse.Namespace, mode: str) -> list[str]:
    """``s3kv serve`` settings under which every case's objects and requests fit."""
    largest = max(*args.sizes, args.batch_block)
    segment = segment_size(args)
    memory = max(512 * MiB, 4 * args.concurrent * max(largest, args.batch * args.batch_block))
    return ["--etag", mode, "--log-level", "warning", "--sync-interval", "0",
            "--node-id", f"ceiling-{mode}", "--segment-size", str(segment),
            "--max-block-size", str(largest), "--max-request-memory", str(memory),
            "--capacity", str(args.capacity), *args.gateway_args.split()]


@contextlib.contextmanager
def sides(args: argparse.Namespace) -> Iterator[list[Side]]:
    """The bare server and one gateway per ETag mode, each gateway on its own fresh store."""
    shm = Path(args.shm_dir)
    with contextlib.ExitStack() as stack:
        tmp = Path(tempfile.mkdtemp(prefix="gateway-ceiling-", dir=shm))
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        url, pid = stack.enter_context(sink_process())
        out = [Side("bare", url, pid)]
        for mode in MODES:
            gw = stack.enter_context(gateway_subprocess(
                None, f"file://{tmp / mode}", gateway_args(args, mode), access=GW_ACCESS,
                secret=GW_SECRET))
            out.append(Side(mode, gw.url, gw.pid))
        yield out


def full_store_bytes(capacity: int, segment: int) -> int:
    """What fills a file store of ``capacity`` so that it runs full, as a cache tier does: its
    capacity, the file backend's pool of recycled files, and one segment more, so every later
    segment is written over a recycled file."""
    return capacity + RECYCLE_BYTES + segment


def fill_bytes(args: argparse.Namespace) -> int:
    """What ``--fill auto`` stores in a gateway before the timed runs (a full store)."""
    return full_store_bytes(args.capacity, segment_size(args))


async def fill(url: str, nbytes: int, block_size: int) -> None:
    """Store ``nbytes`` of ``block_size`` blocks through the native batch API (untimed),
    resending what the gateway pushes back."""
    block = os.urandom(block_size)
    keys = [f"fill-{i:07d}" for i in range(-(-nbytes // block_size))]
    per_request = max(1, 16 * MiB // block_size)
    async with S3KVClient(url, token=f"{GW_ACCESS}:{GW_SECRET}") as client:
        await client.create_namespace(FILL_NAMESPACE)
        while keys:
            try:
                await client.put_many(FILL_NAMESPACE, [(k, block) for k in keys[:per_request]])
                keys = keys[per_request:]
            except Backpressure as exc:
                keys = keys[exc.stored:]
                await asyncio.sleep(min(exc.retry_after, 1.0))


def measure(args: argparse.Namespace, say: Progress) -> dict[str, Any]:
    detail: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gateway-ceiling-records-") as records, \
            sides(args) as all_sides:
        for side in all_sides[1:] if args.fill else []:
            say(f"filling the {side.name} gateway's store with {format_size(args.fill)} "
                "(untimed)")
            asyncio.run(fill(side.url, args.fill, max(*args.sizes, args.batch_block)))
        load = Load(args.concurrent, args.duration, args.batch, args.set_bytes, GW_ACCESS,
                    GW_SECRET, Path(records))
        todo = cases(args)
        for n, case in enumerate(todo, 1):
            rounds: dict[str, list[dict[str, Any]]] = {s.name: [] for s in all_sides}
            if args.warmup:
                # untimed: the first run of a case grows each process's heap to the case's
                # request sizes (32 MiB PUTs after 256 KiB ones: fresh pages, 2.6x the CPU
                # per op of the later repeats here), which the repeats should not time
                for side in all_sides:
                    say(f"[{n}/{len(todo)}] {case.label} {side.name}: warm-up "
                        f"{args.warmup:g} s (untimed)")
                    run_once(case, side, dataclasses.replace(load, duration=args.warmup))
            for r in range(args.repeats):
                for side in all_sides:
                    say(f"[{n}/{len(todo)}] {case.label} repeat {r + 1}/{args.repeats} "
                        f"{side.name}: running {args.duration:g} s")
                    figures = run_once(case, side, load)
                    rounds[side.name].append(figures)
                    say(f"[{n}/{len(todo)}] {case.label} repeat {r + 1}/{args.repeats} "
                        f"{side.name}: {figures['MiB_s']:.1f} MiB/s, {figures['ops_s']:.1f} "
                        f"op/s, server CPU {figures['server_cpu_ms_per_op']:.3f} ms/op")
            entry: dict[str, Any] = {name: medians(runs) for name, runs in rounds.items()}
            for mode in MODES:
                entry[f"ratio_{mode}_repeats"] = [
                    round(g["MiB_s"] / b["MiB_s"], 3)
                    for g, b in zip(rounds[mode], rounds["bare"], strict=True)]
                entry[f"ratio_{mode}"] = statistics.median(entry[f"ratio_{mode}_repeats"])
            detail[case.label] = entry
    return detail


def headline(args: argparse.Namespace, detail: dict[str, Any]) -> dict[str, Any]:
    """The issue's keys (fast), and the same suffixed ``_md5``."""
    out: dict[str, Any] = {}
    for mode in MODES:
        suffix = "" if mode == "fast" else f"_{mode}"
        for case in cases(args):
            entry = detail[case.label]
            out[f"{case.op}_ratio_{format_size(case.size)}{suffix}"] = entry[f"ratio_{mode}"]
            if case.op == "put":
                size = format_size(case.size)
                gw = entry[mode]
                out[f"gateway_cpu_s_per_gib_put_{size}{suffix}"] = gw["server_cpu_s_per_GiB"]
                out[f"gateway_cpu_ms_per_put_{size}{suffix}"] = gw["server_cpu_ms_per_op"]
    return out


def table(detail: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [f"gateway vs bare aiohttp server, same client ({args.concurrent} connections, "
             f"{args.duration:g} s per run, medians of {args.repeats}); CPU is per op "
             "(object, or block in batches) and per GiB",
             f"{'case':<20}{'side':<6}{'MiB/s':>9}{'op/s':>10}{'ratio':>7}"
             f"{'srv ms/op':>11}{'loop ms/op':>11}{'srv s/GiB':>11}{'cli ms/op':>11}"
             f"{'cli s/GiB':>11}{'peak RSS':>10}{'(anon)':>10}"]
    for label, entry in detail.items():
        for name in ("bare", *MODES):
            f = entry[name]
            ratio = f"{entry[f'ratio_{name}']:.2f}" if name != "bare" else ""
            lines.append(f"{label if name == 'bare' else '':<20}{name:<6}{f['MiB_s']:>9.1f}"
                         f"{f['ops_s']:>10.1f}{ratio:>7}{f['server_cpu_ms_per_op']:>11.3f}"
                         f"{f['server_loop_cpu_ms_per_op']:>11.3f}"
                         f"{f['server_cpu_s_per_GiB']:>11.3f}{f['client_cpu_ms_per_op']:>11.3f}"
                         f"{f['client_cpu_s_per_GiB']:>11.3f}{f['peak_rss_MiB']:>7} MiB"
                         f"{f['peak_anon_MiB']:>7} MiB")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="256KiB,2MiB,32MiB", metavar="LIST",
                   help="object sizes of the S3 PUT and GET cases [default: 256KiB,2MiB,32MiB]")
    p.add_argument("--batch-block", default="256KiB", metavar="SIZE",
                   help="block size of the native batch cases [default: 256KiB]")
    p.add_argument("--batch", type=int, default=64, metavar="N",
                   help="blocks per native batch request [default: 64]")
    p.add_argument("--concurrent", type=int, default=4, metavar="N",
                   help="requests in flight, one connection each [default: 4]")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help=f"seconds per run [default: {DEFAULTS['duration']:g}, "
                   f"--quick {QUICK['duration']:g}]")
    p.add_argument("--repeats", type=int, default=None, metavar="N",
                   help="interleaved runs per case and side; figures are medians "
                   f"[default: {DEFAULTS['repeats']}, --quick {QUICK['repeats']}]")
    p.add_argument("--warmup", type=float, default=None, metavar="SECONDS",
                   help="an untimed run of each case on each side before its repeats, so "
                   "that no timed run pays for growing a process's memory to the case "
                   f"[default: {DEFAULTS['warmup']:g}, --quick {QUICK['warmup']:g}; 0: none]")
    p.add_argument("--set-bytes", default=None, metavar="SIZE",
                   help="bytes a GET run stores first and then reads (4 to 1024 objects, 1 "
                   f"to 64 batches) [default: {DEFAULTS['set_bytes']}, --quick "
                   f"{QUICK['set_bytes']}]")
    p.add_argument("--capacity", default="2GiB", metavar="SIZE",
                   help="each gateway's --capacity: its store evicts whole segments above it, "
                   "so /dev/shm stays bounded [default: 2GiB]")
    p.add_argument("--fill", default="auto", metavar="SIZE",
                   help="bytes stored in each gateway before the timed runs (untimed), so it "
                   "runs full, as a cache tier does: auto = --capacity + the file backend's "
                   "1 GiB pool of recycled files + a segment; 0 measures from an empty store, "
                   "where every segment lands on newly allocated tmpfs pages (on this VM that "
                   "alone is 1-3.6 CPU-s per GiB) [default: auto]")
    p.add_argument("--gateway-args", default="", metavar="ARGS",
                   help="more s3kv serve flags for both gateways, e.g. '--dram-cache 1GiB'")
    p.add_argument("--shm-dir", default="/dev/shm", metavar="DIR",
                   help="where the gateways' temporary file:// stores go [default: /dev/shm]")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK['duration']:g} s per run, {QUICK['repeats']} repeat, "
                   f"{QUICK['set_bytes']} GET sets: about a minute")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = p.parse_args(argv)
    profile = QUICK if args.quick else DEFAULTS
    for name, value in profile.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
        args.batch_block = parse_size(args.batch_block)
        args.set_bytes = parse_size(str(args.set_bytes))
        args.capacity = parse_size(args.capacity)
        args.fill = fill_bytes(args) if args.fill == "auto" else parse_size(args.fill)
    except ConfigError as exc:
        p.error(str(exc))
    if not args.sizes or min(*args.sizes, args.batch_block, args.batch, args.concurrent,
                             args.repeats) < 1 or args.duration <= 0:
        p.error("sizes, --batch, --concurrent, --repeats and --duration must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = Progress(True, stamped=True)
    try:
        detail = measure(args, say)
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    settings = {"sizes": [format_size(s) for s in args.sizes], "concurrent": args.concurrent,
                "duration_s": args.duration, "repeats": args.repeats, "batch": args.batch,
                "batch_block": format_size(args.batch_block),
                "set_bytes": format_size(args.set_bytes),
                "fill": format_size(args.fill), "warmup_s": args.warmup,
                "gateway_args": gateway_args(args, "fast")}
    if args.json:
        print(json.dumps({**headline(args, detail), "detail": detail, "settings": settings},
                         sort_keys=True))
    else:
        print(table(detail, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
