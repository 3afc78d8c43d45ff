"""Where the S3 server's CPU goes, by library and function, for the request shapes the packing
comparison sets against each other: the gateway's 64 MiB multipart parts against one 256 KiB
object per block (writes), and 32 MiB against 2 MiB ranged GETs of a segment (reads).

Each load runs ``--seconds`` from a pool of boto3 threads with the gateway's S3 backend's
botocore config (SigV4, UNSIGNED-PAYLOAD, no flexible checksums), while ``perf record`` samples
the radosgw and OSD processes. Reported per load: GiB moved, the CPU-seconds per GiB of each
server daemon (radosgw, OSD, mon), and each of the two daemons' samples (as shares of its own)
by library, by function and by thread name (``tp_osd_tp``: the OSD's op threads, where
bluestore reads and checks what it stored; ``msgr-worker-*``: the messenger's socket I/O).
Functions of stripped libraries (Debian's libcrypto) are named by the nearest exported symbol
below them: OpenSSL's MD5 block function is static and shows as ``MD4...`` (it follows MD4's
code), which is what an S3 server spends on the ETag of every byte it stores; ``crc32_iscsi``
is Ceph's CRC-32C (the messenger's and bluestore's checksums). Without ``perf`` only the
CPU-seconds are reported. With ``--split-cores`` the server runs on one CPU and this client on
the other.

    python benchmarks/rgw_profile.py --server rgw --split-cores --seconds 10 --json
"""

from __future__ import annotations

import argparse
import bisect
import collections
import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3

from benchmarks.harness import (
    CPUMeter,
    add_arguments,
    apply_topology,
    server_from_args,
    server_process_names,
)
from s3kv.backends.s3 import client_config
from s3kv.sizes import GiB, KiB, MiB

SEGMENT_PARTS = 4
#: name -> (what, bytes per request, threads)
LOADS = {"put-parts-64MiB": ("PUT", 64 * MiB, 4), "put-256KiB": ("PUT", 256 * KiB, 8),
         "get-range-32MiB": ("GET", 32 * MiB, 4), "get-range-2MiB": ("GET", 2 * MiB, 8)}
_LINE = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.+?)\s*$")


def parse_report(text: str) -> list[tuple[float, str, str]]:
    """``perf report --sort dso,sym --stdio -g none`` lines as (percent, library, symbol)."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out.append((float(m.group(1)), m.group(2), m.group(3)))
    return out


def exported_symbols(library: str) -> list[tuple[int, str]]:
    """(address, name) of a shared library's exported functions, sorted (``nm -D``)."""
    try:
        text = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True,
                              text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    syms = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "Tt":
            syms.append((int(parts[0], 16), parts[2].split("@")[0]))
    return sorted(syms)


def name_addresses(rows: list[tuple[float, str, str]], symbols: dict[str, list[tuple[int, str]]]
                   ) -> dict[tuple[str, str], float]:
    """Samples by (library, function), a raw address named by the nearest exported symbol
    below it in its library (``symbols``: library name -> ``exported_symbols``)."""
    out: collections.Counter[tuple[str, str]] = collections.Counter()
    for pct, dso, sym in rows:
        syms = symbols.get(dso, [])
        if sym.startswith("0x") and syms:
            i = bisect.bisect(syms, (int(sym, 16), "\uffff")) - 1
            sym = f"{syms[i][1]}+" if i >= 0 else sym
        out[(dso, sym)] += pct
    return dict(out)


def _libraries(pid: int) -> dict[str, str]:
    """Library file name -> path, as the process maps them."""
    out = {}
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            path = line.split()[-1]
            if path.startswith("/") and ".so" in path:
                out[Path(path).name] = path
    return out


def s3_client(server: Any) -> Any:
    return boto3.client("s3", config=client_config(max_connections=16),
                        **server.client_kwargs())


def _run_load(s3: Any, bucket: str, load: str, seconds: float, segments: list[str]) -> int:
    what, size, threads = LOADS[load]
    body = os.urandom(size)
    stop = time.monotonic() + seconds
    moved = [0]
    lock = threading.Lock()

    def worker(t: int) -> None:
        n = 0
        while time.monotonic() < stop:
            if load == "put-parts-64MiB":
                key = f"seg-{t}-{n}"
                upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
                parts = [{"PartNumber": p, "ETag": s3.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload, PartNumber=p, Body=body)["ETag"]}
                    for p in range(1, SEGMENT_PARTS + 1)]
                s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                             MultipartUpload={"Parts": parts})
                segments.append(key)
                done = SEGMENT_PARTS * size
            elif what == "PUT":
                s3.put_object(Bucket=bucket, Key=f"obj-{t}-{n}", Body=body)
                done = size
            else:
                key = segments[(t + n) % len(segments)]
                start = (n * size) % (SEGMENT_PARTS * 64 * MiB)
                resp = s3.get_object(Bucket=bucket, Key=key,
                                     Range=f"bytes={start}-{start + size - 1}")
                done = len(resp["Body"].read())
            n += 1
            with lock:
                moved[0] += done

    with cf.ThreadPoolExecutor(threads) as pool:
        list(pool.map(worker, range(threads)))
    return moved[0]


#: the daemons sampled, by ``server_process_names``' name, and how the report names them
DAEMONS = {"rgw": "radosgw", "osd": "osd"}


def _report(perf: str, data: Path, pid: int, sort: str) -> str:
    """``perf report`` of one process's samples, as shares of that process's own."""
    return subprocess.run([perf, "report", "-i", str(data), "--pid", str(pid), "--percentage",
                           "relative", "--no-children", "--sort", sort, "--stdio", "-g", "none"],
                          capture_output=True, text=True).stdout


def threads_of(text: str) -> dict[str, float]:
    """``perf report --sort comm`` lines as thread name -> percent, names that differ only by a
    number (``msgr-worker-0``, ``msgr-worker-2``) summed under one (``msgr-worker-*``)."""
    out: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"^\s*([\d.]+)%\s+(\S.*?)\s*$", line)
        if m:
            out[re.sub(r"\d+$", "*", m.group(2))] += float(m.group(1))
    return {k: round(v, 1) for k, v in out.most_common(5)}


def daemon_profile(perf: str, data: Path, pid: int) -> dict[str, Any]:
    """One daemon's samples by library, by function (the eight largest) and by thread."""
    libs = _libraries(pid)
    rows = parse_report(_report(perf, data, pid, "dso,sym"))
    symbols = {d: exported_symbols(libs[d]) for d in {r[1] for r in rows} if d in libs}
    by_fn = name_addresses(rows, symbols)
    by_lib: collections.Counter[str] = collections.Counter()
    for (dso, _), pct in by_fn.items():
        by_lib[dso] += pct
    return {"by_library": {k: round(v, 1) for k, v in by_lib.most_common(6)},
            "top_functions": [[round(v, 1), f"{d} {s}"] for (d, s), v in
                              sorted(by_fn.items(), key=lambda kv: -kv[1])[:8]],
            "by_thread": threads_of(_report(perf, data, pid, "comm"))}


def profile(server: Any, load: str, seconds: float, segments: list[str], bucket: str,
            meter: CPUMeter) -> dict[str, Any]:
    names = server_process_names(server)
    pids = {DAEMONS[k]: names[k] for k in DAEMONS if k in names}
    perf = shutil.which("perf")
    data = Path(tempfile.mkdtemp(prefix="rgw-profile-")) / "perf.data"
    rec = None
    if perf and pids:
        rec = subprocess.Popen([perf, "record", "-q", "-F", "499", "-p",
                                ",".join(str(p) for p in pids.values()), "-o", str(data),
                                "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    before = meter.sample()
    moved = _run_load(s3_client(server), bucket, load, seconds, segments)
    cpu = meter.delta(before, meter.sample())
    out: dict[str, Any] = {"GiB": round(moved / GiB, 3), "cpu_s_per_GiB": {
        k: round(v * GiB / moved, 3) for k, v in cpu.items() if k != "client"} if moved else {}}
    if rec is not None and perf is not None:
        rec.wait()
        for name, pid in pids.items():
            for key, value in daemon_profile(perf, data, pid).items():
                out[f"{name}_{key}"] = value
    shutil.rmtree(data.parent, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--seconds", type=float, default=10.0,
                   help="how long each load runs (and perf samples) [default: 10]")
    p.add_argument("--loads", default=",".join(LOADS),
                   help=f"comma-separated loads to run, of {', '.join(LOADS)}; the GET loads "
                   "read the segments the first load writes [default: all]")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = p.parse_args(argv)
    loads = [x.strip() for x in args.loads.split(",") if x.strip()]
    unknown = [x for x in loads if x not in LOADS]
    if unknown:
        p.error(f"unknown load {unknown[0]!r}: use {', '.join(LOADS)}")
    with server_from_args(args) as server:
        topology = apply_topology(server, args.split_cores, args.server_cpus)
        meter = CPUMeter.for_run(server)
        bucket = f"profile-{uuid.uuid4().hex[:8]}"
        s3_client(server).create_bucket(Bucket=bucket)
        segments: list[str] = []
        if any(LOADS[x][0] == "GET" for x in loads) and "put-parts-64MiB" not in loads:
            loads.insert(0, "put-parts-64MiB")  # something to read
        results: dict[str, Any] = {"server": server.name, "perf": bool(shutil.which("perf")),
                                   **topology.describe()}
        for load in loads:
            if not args.json:
                print(f"{load}: {args.seconds:g} s", file=sys.stderr)
            results[load] = profile(server, load, args.seconds, segments, bucket, meter)
    if args.json:
        print(json.dumps(results))
    else:
        for load in loads:
            r = results[load]
            print(f"{load}: {r['GiB']} GiB, CPU-s per GiB {r['cpu_s_per_GiB']}")
            for daemon in DAEMONS.values():
                if f"{daemon}_top_functions" not in r:
                    continue
                print(f"  {daemon}, by thread: " + ", ".join(
                    f"{k} {v} %" for k, v in r[f"{daemon}_by_thread"].items()))
                for pct, name in r[f"{daemon}_top_functions"]:
                    print(f"    {pct:5.1f} %  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
