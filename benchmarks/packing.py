"""Block store packing benchmark: the store against one object per block, in one run.

Measured side by side against the same S3 server (s3rver by default; ``--server moto``, or
``--endpoint URL`` for a running one), with the same client library and settings on both sides
(aiobotocore, the botocore ``Config`` of s3kv's S3Backend):

- PUT and GET throughput of 256 KiB and 2 MiB blocks through ``BlockStore`` (S3Backend,
  write-back PUTs; the timed PUT phase ends with ``store.flush()``, so every byte is on the
  server) against one PUT/GET per block straight to S3. Both sides run at concurrency 1 and 8
  and the better of the two counts (issue 2: "the better of concurrency 1 and 8");
- prefix-chain reads: chains of 64 blocks of 256 KiB, one ``store.get_many`` per chain against
  64 per-object GETs per chain (concurrency 1 and 8 within a chain, the better counts);
- index bytes per entry: RSS growth of a fresh subprocess holding a ``BlockIndex`` of 1 million
  entries with 64-byte keys (keys included);
- write amplification: ``store.stats.write_amplification`` of the 256 KiB store after its
  final flush (a steady write-only load: segment parts + footers + sidecars + the namespace
  record, over block bytes accepted).

Ratios are what to compare (between versions of our code); absolute MiB/s on a local s3rver
or moto predict nothing about MinIO (DESIGN.md, "Testing").

    python benchmarks/packing.py                 # s3rver, text report, progress on stderr
    python benchmarks/packing.py --json          # one JSON object on stdout
    python benchmarks/packing.py --server moto --quick --json     # tiny profile (CI smoke)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from benchmarks.harness import (
    BenchServer,
    Progress,
    ServerError,
    add_arguments,
    apply_topology,
    server_from_args,
)
from benchmarks.packing_report import build_report, index_phase, render_text
from benchmarks.packing_runs import (
    FULL,
    NAMESPACE,
    QUICK,
    Comparison,
    Direct,
    Profile,
    Run,
    StoreCounters,
    block_key,
    close_store,
    open_store,
    payloads,
    size_label,
    store_get_all,
    store_put_all,
    store_settings,
    summarize,
    timed,
    warm_store,
)
from s3kv.backends import S3Backend, S3Location
from s3kv.errors import S3KVError
from s3kv.log import configure_logging
from s3kv.sizes import MiB, parse_size


# ---- phases ---------------------------------------------------------------------------------
async def block_phase(size: int, profile: Profile, server: BenchServer, bucket: str,
                      direct: Direct, progress: Progress, seed: int, tag: str
                      ) -> tuple[Comparison, Comparison, dict[str, Any]]:
    """PUT then GET ``profile.volume`` of ``size`` blocks, store and direct, per concurrency."""
    label = size_label(size)
    n = max(1, profile.volume // size)
    nbytes = n * size
    blocks = payloads(n, size, seed)
    rng = np.random.default_rng(seed + 1)
    put, get = Comparison(f"PUT {label}"), Comparison(f"GET {label}")
    pids = server.pids
    store = await open_store(server, bucket, f"store-{label}-{tag}/", store_settings(profile))
    counters = StoreCounters()
    try:
        await warm_store(store, profile, blocks, counters)
        direct_keys: list[str] = []
        store_keys: list[bytes] = []
        for c in profile.concurrency:  # interleaved, so drift on the server hits both sides
            prefix = f"direct-{label}-{tag}/c{c}"
            put.direct.append(await timed("direct", c, nbytes, pids,
                                          partial(direct.put_all, prefix, blocks, c)))
            progress(f"PUT {label} direct c={c}: {put.direct[-1].mib_s:8.1f} MiB/s "
                     f"({n} objects)")
            direct_keys = [f"{prefix}/{i}" for i in range(n)]
            keys = [block_key(f"{label}/{tag}/c{c}", i) for i in range(n)]
            put.store.append(await timed(
                "store", c, nbytes, pids,
                partial(store_put_all, store, keys, blocks, c, counters)))
            progress(f"PUT {label} store  c={c}: {put.store[-1].mib_s:8.1f} MiB/s "
                     f"(incl. flush; {store.stats.segments_sealed} segments sealed so far)")
            store_keys = keys
        stats = store.stats.as_dict()
        for c in profile.concurrency:
            order = rng.permutation(n)
            dkeys = [direct_keys[i] for i in order]
            get.direct.append(await timed("direct", c, nbytes, pids,
                                          partial(direct.get_all, dkeys, size, c)))
            progress(f"GET {label} direct c={c}: {get.direct[-1].mib_s:8.1f} MiB/s")
            skeys = [store_keys[i] for i in order]
            get.store.append(await timed("store", c, nbytes, pids,
                                         partial(store_get_all, store, skeys, size, c)))
            progress(f"GET {label} store  c={c}: {get.store[-1].mib_s:8.1f} MiB/s")
    finally:
        await close_store(store)
    extra = {"write_amplification": stats["write_amplification"], "blocks_per_run": n,
             "backpressure_retries": counters.backpressure_retries,
             "segments_sealed": int(stats["segments_sealed"]),
             "backend_bytes_written": int(stats["backend_bytes_written"]),
             "bytes_accepted": int(stats["bytes_accepted"])}
    return put, get, extra


async def ceiling_phase(profile: Profile, server: BenchServer, bucket: str,
                        progress: Progress, tag: str) -> Run:
    """The server's multipart ceiling: segment-sized objects written as the store writes them.

    ``profile.volume`` bytes as objects of ``segment_size`` in parts of ``part_size``, straight
    through S3Backend (no store): the same parts in flight (``max_parts_in_flight``) and
    segments in flight (``max_open_segments``) as the store's defaults; one-part segments
    (``part_size == segment_size``) as single PUTs, as the store writes them. The store's PUT
    throughput cannot exceed this on the same server; the ratio says how close it gets.
    """
    settings = store_settings(profile)
    backend = await S3Backend(S3Location(bucket, "", (server.url,))).open()
    part = np.random.default_rng(7).bytes(profile.part_size)
    parts_per_seg = profile.segment_size // profile.part_size
    nseg = max(1, profile.volume // profile.segment_size)
    part_slots = asyncio.Semaphore(settings.max_parts_in_flight)
    seg_slots = asyncio.Semaphore(settings.max_open_segments)

    async def one_segment(i: int) -> None:
        key = f"ceiling-{tag}/{i}"
        async with seg_slots:
            if parts_per_seg == 1:  # as the store writes a one-part segment: one PUT
                async with part_slots:
                    await backend.put_object(key, part)
                return
            upload_id = await backend.create_multipart(key, profile.part_size)

            async def one_part(n: int) -> tuple[int, str]:
                async with part_slots:
                    return n, await backend.upload_part(key, upload_id, n, part)

            etags = await asyncio.gather(*(one_part(n + 1) for n in range(parts_per_seg)))
            await backend.complete_multipart(key, upload_id, sorted(etags))

    async def all_segments() -> None:
        await asyncio.gather(*(one_segment(i) for i in range(nseg)))

    try:
        run = await timed("multipart", settings.max_open_segments,
                          nseg * profile.segment_size, server.pids, all_segments)
    finally:
        await backend.close()
    how = (f"{size_label(profile.part_size)} parts" if parts_per_seg > 1
           else "single PUTs")
    progress(f"segment-write ceiling ({nseg} x {size_label(profile.segment_size)} objects in "
             f"{how}, no store): {run.mib_s:8.1f} MiB/s")
    return run


async def chain_phase(profile: Profile, server: BenchServer, bucket: str, direct: Direct,
                      progress: Progress, seed: int, tag: str
                      ) -> tuple[Comparison, dict[str, Any]]:
    """Chains written in sequence on both sides (untimed), then read chain after chain."""
    size, length, chains = profile.chain_block, profile.chain_length, profile.chains
    label = size_label(size)
    comp = Comparison(f"chain read {length}x{label}")
    blocks = payloads(chains * length, size, seed)
    pids = server.pids
    total = chains * length * size
    store = await open_store(server, bucket, f"store-chains-{tag}/", store_settings(profile))
    try:
        # each chain's blocks put one after another: contiguous in a segment, as a client does
        keys = [[block_key(f"chain{tag}/{c}", i) for i in range(length)] for c in range(chains)]
        flat = [k for chain in keys for k in chain]
        await store_put_all(store, flat, blocks, 1, StoreCounters())
        prefix = f"chains-{tag}"
        await direct.put_all(prefix, blocks, 8)
        dkeys = [[f"{prefix}/{c * length + i}" for i in range(length)] for c in range(chains)]
        progress(f"chains written: {chains} chains of {length} x {label} on each side")
        reads_before = store.stats.backend_reads

        async def read_direct(c: int) -> None:
            for chain in dkeys:
                await direct.get_all(chain, size, c)

        async def read_store() -> None:
            for chain in keys:
                got = await store.get_many(NAMESPACE, chain)
                if any(b is None or len(b) != size for b in got):
                    raise RuntimeError("store chain read: a miss")

        for c in profile.concurrency:
            comp.direct.append(await timed("direct", c, total, pids, partial(read_direct, c)))
            progress(f"chain read direct c={c}: {comp.direct[-1].mib_s:8.1f} MiB/s "
                     f"({length} GETs per chain)")
        comp.store.append(await timed("store", 1, total, pids, read_store))
        gets = (store.stats.backend_reads - reads_before) / chains
        progress(f"chain read store  get_many: {comp.store[-1].mib_s:8.1f} MiB/s "
                 f"({gets:.2f} ranged GETs per chain)")
    finally:
        await close_store(store)
    return comp, {"backend_gets_per_chain": gets}


# ---- the run --------------------------------------------------------------------------------
COMPARISONS = ("put_256KiB", "get_256KiB", "put_2MiB", "get_2MiB", "chain_read")


async def measure(server: BenchServer, profile: Profile, bucket: str, repeats: int,
                  progress: Progress, seed: int) -> dict[str, Any]:
    progress(f"server {server.name} at {server.url}; bucket {bucket}")
    admin = await S3Backend(S3Location(bucket, "", (server.url,))).open()
    try:
        await admin.ensure_bucket()
    finally:
        await admin.close()
    series: dict[str, list[Comparison]] = {}
    stores: dict[str, list[dict[str, Any]]] = {}
    chain_extra: list[dict[str, Any]] = []
    ceilings: list[Run] = []
    async with Direct(server, bucket) as direct:
        await direct.warm(max(profile.concurrency), profile.warm_requests)
        for r in range(repeats):
            tag = f"r{r}"
            if repeats > 1:
                progress(f"repeat {r + 1} of {repeats}")
            for i, size in enumerate(profile.block_sizes):
                put, get, extra = await block_phase(size, profile, server, bucket, direct,
                                                    progress, seed + 1000 * r + 10 * i, tag)
                label = size_label(size)
                series.setdefault(f"put_{label}", []).append(put)
                series.setdefault(f"get_{label}", []).append(get)
                stores.setdefault(label, []).append(extra)
            ceilings.append(await ceiling_phase(profile, server, bucket, progress, tag))
            chain, extra = await chain_phase(profile, server, bucket, direct, progress,
                                             seed + 1000 * r + 100, tag)
            series.setdefault("chain_read", []).append(chain)
            chain_extra.append(extra)
        if server.kind == "external":  # a server we started goes away with its data dir
            progress("removing the benchmark's objects")
            for prefix in ("direct-", "store-", "chains-", "ceiling-", "warm/"):
                await direct.delete_prefix(prefix)
    ceiling = statistics.median(r.mib_s for r in ceilings)
    return {"comparisons": {k: summarize(v) for k, v in series.items()},
            "store": stores, "chain": chain_extra,
            "multipart_ceiling": {"mib_s": round(ceiling, 2),
                                  "repeats": [r.as_dict() for r in ceilings]}}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Block store vs one object per block, side by side against one S3 server: "
        "PUT/GET throughput ratios (256 KiB and 2 MiB blocks), prefix-chain read ratio, index "
        "bytes per entry and write amplification. Targets (issue 2, not asserted): PUT 256 KiB "
        ">= 2x, PUT 2 MiB >= 1x, chain read >= 2x, index <= 160 B/entry, WA <= 1.02.")
    add_arguments(parser)
    parser.add_argument("--bucket", default=None,
                        help="bucket to use (created if missing) [default: a fresh "
                        "s3kv-packing-<random> bucket]")
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object on stdout instead of the text report")
    parser.add_argument("--quick", action="store_true",
                        help=f"tiny profile for smoke tests (moto-friendly): {QUICK.volume // MiB}"
                        f" MiB per run, {QUICK.segment_size // MiB} MiB segments, "
                        f"{QUICK.chains} chains of {QUICK.chain_length}, "
                        f"{QUICK.index_entries:,} index entries")
    parser.add_argument("--volume", metavar="SIZE", default=None,
                        help=f"block bytes per timed PUT run [default: {size_label(FULL.volume)}"
                        f"; --quick {size_label(QUICK.volume)}]")
    parser.add_argument("--segment-size", metavar="SIZE", default=None,
                        help=f"store segment size [default: {size_label(FULL.segment_size)}]")
    parser.add_argument("--part-size", metavar="SIZE", default=None,
                        help=f"store multipart part size [default: {size_label(FULL.part_size)}]")
    parser.add_argument("--chains", type=int, metavar="N", default=None,
                        help=f"prefix chains read per side [default: {FULL.chains}]")
    parser.add_argument("--chain-length", type=int, metavar="N", default=None,
                        help=f"blocks per prefix chain [default: {FULL.chain_length}]")
    parser.add_argument("--index-entries", type=int, metavar="N", default=None,
                        help=f"entries in the index memory measurement "
                        f"[default: {FULL.index_entries:,}]")
    parser.add_argument("--concurrency", metavar="LIST", default=None,
                        help="comma-separated concurrencies; the best counts on each side "
                        "[default: 1,8]")
    parser.add_argument("--repeats", type=int, metavar="N", default=1,
                        help="repeat the store/direct comparisons N times and report the "
                        "median ratio (the index is measured once) [default: 1]")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the random block payloads [default: 1]")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.endpoint and args.server != "s3rver":
        parser.error("--endpoint and --server are alternatives")
    return args


def profile_from_args(args: argparse.Namespace) -> Profile:
    p = QUICK if args.quick else FULL
    over: dict[str, Any] = {}
    for name in ("volume", "segment_size", "part_size"):
        if getattr(args, name) is not None:
            over[name] = parse_size(getattr(args, name))
    for name in ("chains", "chain_length", "index_entries"):
        if getattr(args, name) is not None:
            over[name] = getattr(args, name)
    if args.concurrency:
        over["concurrency"] = tuple(int(x) for x in args.concurrency.split(",") if x.strip())
    p = replace(p, **over)
    if min(p.chains, p.chain_length, p.index_entries, args.repeats, *p.concurrency) < 1:
        raise ValueError("--chains, --chain-length, --index-entries, --repeats and "
                         "--concurrency must be >= 1")
    store_settings(p)  # validates segment/part sizes
    return p


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("console", "error")
    try:
        profile = profile_from_args(args)
    except (ValueError, S3KVError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    progress = Progress(not args.no_progress, stamped=True)
    bucket = args.bucket or f"s3kv-packing-{os.urandom(4).hex()}"
    started = time.monotonic()
    try:
        index = index_phase(profile.index_entries, progress)
        with server_from_args(args) as server:
            topology = apply_topology(server, args.split_cores, args.server_cpus).describe()
            measured = asyncio.run(measure(server, profile, bucket, args.repeats, progress,
                                           args.seed))
    except (ServerError, S3KVError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    report = build_report(server, profile, args.repeats, measured, index,
                          time.monotonic() - started)
    report.update(topology)
    if args.json:
        print(json.dumps(report, sort_keys=False))
    else:
        print(render_text(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
