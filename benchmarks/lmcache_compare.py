"""LMCache on s3kv three ways, measured side by side through LMCache's own ``RemoteBackend``:

- ``plugin``: the s3kv plugin (s3kv.integrations.lmcache) on the gateway's native API, the
  gateway without a DRAM tier (every retrieve is read from the S3 server: the storage path);
- ``s3_gateway``: LMCache's S3 connector (awscrt) to the gateway's S3 front (the same gateway);
- ``s3_direct``: LMCache's S3 connector to the S3 server the gateway stores on;
- ``plugin_dram`` (with ``--dram-cache SIZE``, default 2GiB; 0 leaves it out): the plugin on a
  second gateway with a DRAM tier of that size, which keeps blocks as they are written, so a
  session that comes back while it is in the tier never touches the S3 server;
- ``plugin_direct_reads`` (with ``--direct-reads SECONDS``, default 600; 0 leaves it out): the
  plugin on a gateway run with ``--direct-reads`` (no DRAM tier), which answers where a sealed
  chunk is and lets the plugin read it from the S3 server itself (s3kv/client_direct.py).

Per route: store a 10K-token session (Llama-3-8B geometry: 40 chunks of 256 tokens, 32 MiB
each) with ``batched_submit_put_task`` until LMCache counts the puts finished (and, on the
gateway routes, until the gateway has flushed them to the S3 server: a gateway acknowledges a
put once the block is in its open segment, so without the flush its uploads of the session
would run inside the retrieve and be charged to it; with it, both sides' store ends with the
bytes on the server), retrieve it with
``batched_get_blocking`` (bytes verified), and look up a 64-chunk prefix with ``batched_contains``
from a fresh RemoteBackend (a fresh S3 connector has no size cache, as another engine replica or
a restarted one has none: it sends one HEAD per chunk). Each route first runs ``--warmup``
untimed store + retrieve rounds: an engine serves for hours, and LMCache's S3 connector (awscrt)
grows its buffers over its first retrieves, page-faulting them in (measured beside other
engines' memory: 2.66, 1.23, 0.77, then 0.66-0.71 client CPU-s per GiB over its first rounds).
Then the routes run interleaved, ``--repeat`` rounds in rotating order, on one server; figures
are medians over the rounds. CPU is each process's user + system time over each phase (psutil;
this process's own from its CPU clock);
``{phase}_page_faults_per_gib`` counts this process's minor page faults (the S3 connector gives
memory back between retrieves and pays to touch it again: 8,000-70,000 faults per 1.25 GiB
retrieve in one interleaved run, at 0.78-1.71 CPU-s per GiB, against ~300 and 0.63-0.71 when it
retrieves back to back alone); "server" sums all of the S3 server's
processes (RGW: radosgw, the OSD and the mon); "machine" is every CPU's busy time, "other" the
part of it outside those processes (interrupts taken while idle, kernel threads),
"interrupts" the hard and soft interrupts in it (the virtual disk's reads show there, mostly
charged to the processes they interrupted), and ``{phase}_cpu{i}_busy`` how busy each CPU was
(benchmarks/cores.py): a phase with every CPU near 1 was bound by this machine's CPUs, and
then two routes' rates are their CPU per GiB apart.

LMCache's S3 connector addresses buckets virtual-hosted style (``Host: BUCKET.DOMAIN:PORT``,
resolved by awscrt), so ``lmcgw.s3.localtest`` and ``lmcdirect.s3.localtest`` must resolve to
127.0.0.1: ``--hosts-entry`` appends them to /etc/hosts for the run and removes them after
(root only). The S3 server must serve virtual-hosted buckets: RGW (the default) and moto do;
s3rver is started path-style only by benchmarks/servers.py.

Needs LMCache (``.venv-lmcache``, see .ci/run)::

    .venv-lmcache/bin/python benchmarks/lmcache_compare.py --hosts-entry --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3
import numpy as np
import psutil
import xxhash

from benchmarks import cores
from benchmarks.lmcache_engine import (
    ACCESS,
    BACKEND_BUCKET,
    DIRECT_BUCKET,
    DIRECT_READS_ROUTE,
    DOMAIN,
    DRAM_ROUTE,
    GW_BUCKET,
    LLAMA3_8B,
    LOOKUP,
    PLUGIN_ROUTES,
    ROUTES,
    SECRET,
    Engine,
    gateway,
    hosts_entry,
)
from benchmarks.servers import BenchServer, add_server_arguments, server_from_args
from s3kv.log import configure_logging
from s3kv.sizes import parse_size

GiB = 1024 ** 3


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU-seconds so far. This process's from its own clock (to the
    nanosecond: a small run's retrieve costs the engine ~10 ms, one tick of /proc's clock,
    which psutil reads), the others' from /proc."""
    if pid == os.getpid():
        return time.process_time()
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _cpu(pids: dict[str, tuple[int, ...]]) -> dict[str, float]:
    """CPU-seconds so far per name, summed over its processes, and the machine's
    (``benchmarks.cores``)."""
    out = cores.sample()
    for name, group in pids.items():
        out[name] = sum(_cpu_seconds(pid) for pid in group)
    return out


def _spent(before: dict[str, float], after: dict[str, float], pids: dict[str, tuple[int, ...]],
           phase: str, gib: float, seconds: float) -> dict[str, float]:
    """A phase's CPU-seconds per GiB by name (``{phase}_cpu_s_per_gib_{name}``; ``other``: the
    machine's busy time outside the named processes) and how busy each CPU was."""
    d = cores.between(before, after)
    d["other"] = cores.outside(d, pids)
    out = {f"{phase}_cpu_s_per_gib_{k}": v / gib for k, v in d.items()
           if k in pids or k in (*cores.TOTALS, "other")}
    out.update({f"{phase}_{k}": v for k, v in cores.busy(d, seconds).items()})
    return out


def _faults() -> int:
    """This process's page faults so far that needed no disk (memory taken in, zeroed or
    mapped: what a client pays to touch buffers it had given back)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _native(url: str, method: str, path: str, timeout: float) -> None:
    """One call to a gateway's native API (``/v1/...``) with the benchmark's token."""
    urllib.request.urlopen(urllib.request.Request(
        f"{url}/v1/{path}", method=method,
        headers={"Authorization": f"Bearer {ACCESS}:{SECRET}"}), timeout=timeout).close()


def _digest(obj: Any) -> int:
    return xxhash.xxh3_64_intdigest(memoryview(obj.byte_array).cast("B"))


def one_round(e: Engine, route: str, server: BenchServer, urls: dict[str, str],
              pids: dict[str, tuple[int, ...]], flush_url: str | None, tokens: int,
              lookup_n: int, salt: int) -> dict[str, float]:
    """One store + retrieve on the route's engine (kept across rounds: LMCache's S3 connector
    cannot be closed, so a fresh engine per round would keep its CPU memory forever), then, with
    ``lookup_n``, the lookup from a fresh small engine."""
    rng = np.random.default_rng(salt)
    n = tokens // LLAMA3_8B[2]
    keys, objs = e.keys(n, salt), e.chunks(n, rng)
    size = sum(len(memoryview(o.byte_array).cast("B")) for o in objs)
    c0, t0, f0 = _cpu(pids), time.perf_counter(), _faults()
    e.store(keys, objs)
    if flush_url is not None:  # the open segments, uploaded and durable on the S3 server
        _native(flush_url, "POST", "flush", 600)
    t1 = time.perf_counter()
    want = [_digest(o) for o in objs]  # the originals go back before the retrieve needs room
    for o in objs:
        o.ref_count_down()
    c1, t1b, f1 = _cpu(pids), time.perf_counter(), _faults()
    got = e.backend.batched_get_blocking(keys)
    t2, c2, f2 = time.perf_counter(), _cpu(pids), _faults()
    ok = all(g is not None and _digest(g) == w for g, w in zip(got, want, strict=True))
    for g in got:
        if g is not None:
            g.ref_count_down()
    figures = {"store_gib_s": size / GiB / (t1 - t0),
               "retrieve_gib_s": size / GiB / (t2 - t1b),
               "verified": float(ok), "bytes": float(size),
               "store_page_faults_per_gib": (f1 - f0) / (size / GiB),
               "retrieve_page_faults_per_gib": (f2 - f1) / (size / GiB),
               **_spent(c0, c1, pids, "store", size / GiB, t1 - t0),
               **_spent(c1, c2, pids, "retrieve", size / GiB, t2 - t1b)}
    if not lookup_n:
        return figures
    # the lookup: 64 small chunks stored by one engine, looked up by a fresh one
    w = Engine(route, LOOKUP, urls, server, 0.05)
    lk = w.keys(lookup_n, salt + 1000)
    small = w.chunks(lookup_n, rng)
    w.store(lk, small)
    for o in small:
        o.ref_count_down()
    w.close()
    r = Engine(route, LOOKUP, urls, server, 0.05)
    t3 = time.perf_counter()
    found = r.backend.batched_contains(lk)
    t4 = time.perf_counter()
    r.close()
    return {**figures, "lookup_ms": (t4 - t3) * 1000, "lookup_found": float(found)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_arguments(parser)
    parser.add_argument("--tokens", type=int, default=10240,
                        help="session length in tokens (256 a chunk) [default: 10240]")
    parser.add_argument("--lookup-chunks", type=int, default=64,
                        help="chunks in the looked-up prefix [default: 64]")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per route [default: 3]")
    parser.add_argument("--warmup", type=int, default=2, metavar="N",
                        help="untimed store + retrieve rounds per route first, so that each "
                        "engine is measured warm, as it serves [default: 2]")
    parser.add_argument("--cpu-gib", type=float, default=1.5,
                        help="LMCache's CPU allocator per route, GiB (one session and some "
                        "room) [default: 1.5]")
    parser.add_argument("--dram-cache", default="2GiB", metavar="SIZE",
                        help="DRAM tier of the plugin_dram route's gateway (0: no such route) "
                        "[default: 2GiB, more than one session]")
    parser.add_argument("--direct-reads", type=int, default=600, metavar="SECONDS",
                        help="the plugin_direct_reads route's gateway runs with --direct-reads "
                        "SECONDS (0: no such route) [default: 600]")
    parser.add_argument("--hosts-entry", action="store_true",
                        help="add the benchmark's S3 host names to /etc/hosts for the run")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if min(args.repeat, args.lookup_chunks, args.tokens // LLAMA3_8B[2]) < 1 or args.warmup < 0:
        parser.error("--repeat and --lookup-chunks must be at least 1, --tokens at least 256 "
                     "(one chunk) and --warmup at least 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on kill, too
    configure_logging("console", "warning")  # the plugin's log lines to stderr, not the JSON
    names = [f"{GW_BUCKET}.{DOMAIN}", f"{DIRECT_BUCKET}.{DOMAIN}"]
    with hosts_entry(names, args.hosts_entry), \
            server_from_args(args, dns_name=DOMAIN) as server:
        s3 = boto3.client("s3", **server.client_kwargs())
        s3.create_bucket(Bucket=BACKEND_BUCKET)
        s3.create_bucket(Bucket=DIRECT_BUCKET)
        with contextlib.ExitStack() as stack:
            gw_url, gw_pid = stack.enter_context(gateway(server))
            routes: tuple[str, ...] = ROUTES
            port = int(server.url.rsplit(":", 1)[1])
            urls = {"plugin": gw_url,
                    "s3_gateway": f"s3://{names[0]}:{gw_url.rsplit(':', 1)[1]}",
                    "s3_direct": f"s3://{names[1]}:{port}"}
            gateways = {r: (gw_url, gw_pid) for r in ROUTES}  # route -> its gateway
            if parse_size(args.dram_cache):
                dram_url, dram_pid = stack.enter_context(
                    gateway(server, "kv-dram", args.dram_cache))
                routes = (*ROUTES, DRAM_ROUTE)
                urls[DRAM_ROUTE] = dram_url
                gateways[DRAM_ROUTE] = (dram_url, dram_pid)
            if args.direct_reads:
                direct_url, direct_pid = stack.enter_context(
                    gateway(server, "kv-direct", direct_reads=args.direct_reads))
                routes = (*routes, DIRECT_READS_ROUTE)
                urls[DIRECT_READS_ROUTE] = direct_url
                gateways[DIRECT_READS_ROUTE] = (direct_url, direct_pid)
            for url in {u for r, u in urls.items() if r in PLUGIN_ROUTES}:
                _native(url, "PUT", GW_BUCKET, 30)
            rounds: dict[str, list[dict[str, float]]] = {r: [] for r in routes}
            engines = {r: Engine(r, LLAMA3_8B, urls, server, args.cpu_gib) for r in routes}
            for i in range(args.warmup + args.repeat):
                timed = i >= args.warmup
                k = i % len(routes)
                for route in routes[k:] + routes[:k]:  # rotate the order
                    _say(f"round {i - args.warmup + 1}/{args.repeat}: {route}" if timed else
                         f"warm-up {i + 1}/{args.warmup}: {route}")
                    route_url, route_pid = gateways[route]
                    pids: dict[str, tuple[int, ...]] = {"gateway": (route_pid,),
                                                        "client": (os.getpid(),)}
                    if server.pids:
                        pids["server"] = server.pids
                    flush_url = None if route == "s3_direct" else route_url
                    result = one_round(engines[route], route, server, urls, pids, flush_url,
                                       args.tokens, args.lookup_chunks if timed else 0,
                                       10 * i + routes.index(route))
                    if timed:
                        rounds[route].append(result)
            for eng in engines.values():
                eng.close()
    bad = [r for r, rs in rounds.items() if not all(x["verified"] and x["lookup_found"] ==
                                                     args.lookup_chunks for x in rs)]
    if bad:
        raise SystemExit(f"routes {bad} did not return every chunk intact: no figures")
    med = {r: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for r, rs in rounds.items()}
    d, p = med["s3_direct"], med["plugin"]
    out = {"server": server.name, "tokens": args.tokens, "chunk_bytes": 32 * 1024 * 1024,
           "repeat": args.repeat, "warmup": args.warmup, "routes": med,
           # each round's retrieve rate per route, GiB/s (the medians' spread)
           "retrieve_gib_s_rounds": {r: [x["retrieve_gib_s"] for x in rs]
                                     for r, rs in rounds.items()},
           "retrieve_ratio_vs_direct": p["retrieve_gib_s"] / d["retrieve_gib_s"],
           "store_ratio_vs_direct": p["store_gib_s"] / d["store_gib_s"],
           "lookup_speedup_vs_direct": d["lookup_ms"] / p["lookup_ms"],
           "s3_gateway_retrieve_ratio_vs_direct": (med["s3_gateway"]["retrieve_gib_s"]
                                                   / d["retrieve_gib_s"]),
           "load_average_1m_at_end": os.getloadavg()[0]}
    if DRAM_ROUTE in med:
        m = med[DRAM_ROUTE]
        out["dram_cache"] = args.dram_cache
        out["retrieve_ratio_vs_direct_dram"] = m["retrieve_gib_s"] / d["retrieve_gib_s"]
        out["store_ratio_vs_direct_dram"] = m["store_gib_s"] / d["store_gib_s"]
    if DIRECT_READS_ROUTE in med:
        m = med[DIRECT_READS_ROUTE]
        out["retrieve_ratio_vs_direct_direct_reads"] = m["retrieve_gib_s"] / d["retrieve_gib_s"]
        out["store_ratio_vs_direct_direct_reads"] = m["store_gib_s"] / d["store_gib_s"]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for r, m in med.items():
            print(f"{r:19s} store {m['store_gib_s']:.3f} GiB/s  retrieve "
                  f"{m['retrieve_gib_s']:.3f} GiB/s  lookup({args.lookup_chunks}) "
                  f"{m['lookup_ms']:.1f} ms found {m['lookup_found']:.0f}")
            print(" " * 20 + "retrieve CPU-s per GiB: " + ", ".join(
                f"{k} {m[f'retrieve_cpu_s_per_gib_{k}']:.2f}" for k in
                ("client", "gateway", "server", "other", "interrupts", "machine")
                if f"retrieve_cpu_s_per_gib_{k}" in m) + "; CPUs busy " + " / ".join(
                f"{v:.2f}" for k, v in sorted(m.items())
                if k.startswith("retrieve_cpu") and k.endswith("_busy"))
                + f"; page faults per GiB {m['retrieve_page_faults_per_gib']:,.0f}")
        print(f"plugin vs direct: retrieve x{out['retrieve_ratio_vs_direct']:.2f}, store "
              f"x{out['store_ratio_vs_direct']:.2f}, lookup x{out['lookup_speedup_vs_direct']:.1f}")
        if DRAM_ROUTE in med:
            print(f"plugin with a {args.dram_cache} DRAM tier vs direct: retrieve "
                  f"x{out['retrieve_ratio_vs_direct_dram']:.2f}, store "
                  f"x{out['store_ratio_vs_direct_dram']:.2f}")
        if DIRECT_READS_ROUTE in med:
            print(f"plugin with direct reads vs direct: retrieve "
                  f"x{out['retrieve_ratio_vs_direct_direct_reads']:.2f}, store "
                  f"x{out['store_ratio_vs_direct_direct_reads']:.2f}")
    os._exit(0)  # LMCache's S3 connector threads never stop (its close never returns)


if __name__ == "__main__":
    sys.exit(main())
