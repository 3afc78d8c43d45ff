"""Where the S3 server's CPU goes, by library and function, for the request shapes the packing
comparison sets against each other: the gateway's 64 MiB multipart parts against one 256 KiB
object per block (writes), and 32 MiB against 2 MiB ranged GETs of a segment (reads).

Each load runs ``--seconds`` from a pool of boto3 threads with the gateway's S3 backend's
botocore config (SigV4, UNSIGNED-PAYLOAD, no flexible checksums), while ``perf record`` samples
every CPU for exactly that time. Reported per load: GiB moved, the CPU-seconds per GiB of each
server daemon (radosgw, OSD, mon), and radosgw's and the OSD's samples (each as shares of its
own, and how many: perf samples 499 times a CPU-second) by library, by function and by thread
name (``tp_osd_tp``: the OSD's op threads, where bluestore reads and checks what it stored;
``msgr-worker-*``: the messenger's socket I/O).
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
import contextlib
import functools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
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
#: seconds perf record may take to switch its sampling on or off (it attaches first)
PERF_TIMEOUT = 60.0
#: a ``perf script -F comm,pid,ip,sym,dso`` line: thread name, process, address, function, library
_SAMPLE = re.compile(r"^\s*(.*?)\s+(\d+)\s+([0-9a-f]+)\s+(.*?)\s+\(([^()]*)\)\s*$")


@dataclass(frozen=True)
class Sample:
    """One ``perf script`` sample: its thread's name, process, library file name and function
    (``0x...``: an address in the library, for a function perf could not name)."""

    thread: str
    pid: int
    dso: str
    sym: str


def parse_script(text: str, maps: dict[int, list[tuple[int, int, int, str]]]) -> list[Sample]:
    """``perf script -F comm,pid,ip,sym,dso`` lines as samples. A function perf could not name
    gets its address inside the library it is in (``maps``: pid -> that process's mappings,
    ``mappings``), as ``perf report`` would print it."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        thread, pid, ip, sym, path = m.group(1), int(m.group(2)), int(m.group(3), 16), \
            m.group(4), m.group(5)
        if sym == "[unknown]":
            for start, end, offset, mapped in maps.get(pid, []):
                if start <= ip < end and mapped == path:
                    sym = f"0x{ip - start + offset:016x}"
                    break
        dso = path if path.startswith("[") else Path(path).name
        out.append(Sample(thread, pid, dso, sym))
    return out


def mappings(pid: int) -> list[tuple[int, int, int, str]]:
    """(start, end, file offset, path) of a process's file mappings (``/proc/PID/maps``)."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/"):
                start, end = (int(x, 16) for x in parts[0].split("-"))
                out.append((start, end, int(parts[2], 16), parts[5]))
    return out


@functools.cache  # one nm per library a run, not one per load and daemon
def exported_symbols(library: str) -> list[tuple[int, str]]:
    """(address, name) of a shared library's exported functions, sorted (``nm -D``; the list is
    shared by every caller: read it, do not change it)."""
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


def daemon_profile(samples: list[Sample], pid: int, libraries: dict[str, str]
                   ) -> dict[str, Any]:
    """One process's samples as shares of its own: by library, by function (the eight largest)
    and by thread name, names that differ only by a number (``msgr-worker-0``,
    ``msgr-worker-2``) summed under one (``msgr-worker-*``). ``libraries``: library file name
    -> path, to name the addresses of stripped ones (``exported_symbols``)."""
    own = [x for x in samples if x.pid == pid]
    if not own:
        return {}
    share = 100 / len(own)
    rows = [(n * share, dso, sym) for (dso, sym), n in
            collections.Counter((x.dso, x.sym) for x in own).items()]
    symbols = {d: exported_symbols(libraries[d]) for d in {r[1] for r in rows} if d in libraries}
    by_fn = name_addresses(rows, symbols)
    by_lib: collections.Counter[str] = collections.Counter()
    for (dso, _), pct in by_fn.items():
        by_lib[dso] += pct
    threads = collections.Counter(re.sub(r"\d+$", "*", x.thread) for x in own)
    return {"samples": len(own),
            "by_library": {k: round(v, 1) for k, v in by_lib.most_common(6)},
            "top_functions": [[round(v, 1), f"{d} {s}"] for (d, s), v in
                              sorted(by_fn.items(), key=lambda kv: -kv[1])[:8]],
            "by_thread": {k: round(n * share, 1) for k, n in threads.most_common(5)}}


@contextlib.contextmanager
def recording(perf: str, data: Path) -> Iterator[None]:
    """``perf record`` of every CPU (into ``data``, whose folder also takes two FIFOs; the
    samples name their process), sampling exactly while the body runs: perf starts with its
    events off (``--delay=-1``) and is switched on and off through its control FIFO, each switch
    acknowledged, so its own set-up is outside the window the CPU meter measures. Every CPU, not
    ``-p PID``: attached to radosgw's threads, perf missed a quarter to half of its CPU time."""
    ctl, ack = data.parent / "ctl", data.parent / "ack"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    rec = subprocess.Popen([perf, "record", "-q", "-F", "499", "-a",
                            "-o", str(data), "--delay=-1", f"--control=fifo:{ctl},{ack}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # read-write: opening either FIFO then never waits for perf's end
    to_perf, from_perf = os.open(ctl, os.O_RDWR), os.open(ack, os.O_RDWR)
    try:
        _command(rec, to_perf, from_perf, "enable")
        yield
        _command(rec, to_perf, from_perf, "disable")
    finally:
        rec.send_signal(signal.SIGINT)  # perf writes its data and exits
        rec.wait(timeout=120)
        os.close(to_perf)
        os.close(from_perf)


def _command(rec: subprocess.Popen[bytes], to_perf: int, from_perf: int, what: str) -> None:
    os.write(to_perf, f"{what}\n".encode())
    deadline = time.monotonic() + PERF_TIMEOUT
    while time.monotonic() < deadline:
        if select.select([from_perf], [], [], 0.2)[0]:
            os.read(from_perf, 64)  # "ack"
            return
        if rec.poll() is not None:
            raise RuntimeError(f"perf record exited ({rec.returncode}) before it took {what!r}:"
                               " is perf allowed to sample the whole machine here (root, or "
                               "kernel.perf_event_paranoid <= 0)?")
    raise RuntimeError(f"perf record did not take {what!r} within {PERF_TIMEOUT:g} s")


def profile(server: Any, load: str, seconds: float, segments: list[str], bucket: str,
            meter: CPUMeter) -> dict[str, Any]:
    names = server_process_names(server)
    pids = {DAEMONS[k]: names[k] for k in DAEMONS if k in names}
    perf = shutil.which("perf")
    data = Path(tempfile.mkdtemp(prefix="rgw-profile-")) / "perf.data"
    try:
        with recording(perf, data) if perf and pids else contextlib.nullcontext():
            before = meter.sample()
            moved = _run_load(s3_client(server), bucket, load, seconds, segments)
            cpu = meter.delta(before, meter.sample())
        out: dict[str, Any] = {"GiB": round(moved / GiB, 3), "cpu_s_per_GiB": {
            k: round(v * GiB / moved, 3) for k, v in cpu.items() if k != "client"}
            if moved else {}}
        if perf and pids:
            # perf script, not perf report: report's --pid drops the samples of threads it has
            # no record of (most of radosgw's), where script has each sample's process
            maps = {pid: mappings(pid) for pid in pids.values()}
            samples = parse_script(subprocess.run(
                [perf, "script", "-i", str(data), "-F", "comm,pid,ip,sym,dso"],
                capture_output=True, text=True).stdout, maps)
            for name, pid in pids.items():
                libraries = {Path(path).name: path for *_, path in maps[pid] if ".so" in path}
                for key, value in daemon_profile(samples, pid, libraries).items():
                    out[f"{name}_{key}"] = value
    finally:
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
