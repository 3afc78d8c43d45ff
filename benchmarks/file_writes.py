"""What two writer threads cost when they write parts into one file (the file backend's case).

Two worker threads write ``--part``-sized parts, each ``pwritev`` of ``--piece``-sized buffers,
over preallocated files in ``--dir`` (the file store's recycled files), three ways, interleaved
over ``--rounds`` (medians reported):

- ``one_file``: both threads into the same file at once (the file backend before filelocks.py);
- ``one_file_locked``: the same, each write under the file's lock (``FileLocks``, as now);
- ``two_files``: each thread into a file of its own.

Reported: this process's CPU seconds per GiB written (``time.process_time``) and wall seconds
per GiB. Linux serializes buffered writes into one file; without the lock the waiting thread
spins on the inode's lock while the owner copies.

    python benchmarks/file_writes.py [--dir /dev/shm] [--gib 4] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from s3kv.backends.filelocks import FileLocks
from s3kv.sizes import GiB, MiB, format_size, parse_size

MODES = ("one_file", "one_file_locked", "two_files")


def run_mode(mode: str, fds: list[int], pieces: list[bytes], part: int, file_bytes: int,
             total: int) -> tuple[float, float]:
    """(CPU s, wall s) to write ``total`` bytes in parts, two threads, the ``mode`` way."""
    locks = FileLocks()
    per_part = part // len(pieces[0])
    parts = total // part
    slots = file_bytes // part

    def write(k: int) -> None:
        f = k % 2 if mode == "two_files" else 0
        offset = ((k // 2 if mode == "two_files" else k) % slots) * part
        bufs = [pieces[(k * per_part + j) % len(pieces)] for j in range(per_part)]
        guard: AbstractContextManager[None] = (locks.held(str(f)) if mode == "one_file_locked"
                                               else nullcontext())
        with guard:
            os.pwritev(fds[f], bufs, offset)

    with ThreadPoolExecutor(2) as pool:
        cpu, wall = time.process_time(), time.perf_counter()
        for done in pool.map(write, range(parts)):
            del done
        return time.process_time() - cpu, time.perf_counter() - wall


def measure(args: argparse.Namespace) -> dict[str, object]:
    pieces = [os.urandom(args.piece) for _ in range(max(1, 64 * MiB // args.piece))]
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        fds = []
        for i in range(2):  # preallocated: the pages exist, as in a recycled segment file
            fd = os.open(os.path.join(d, f"f{i}"), os.O_RDWR | os.O_CREAT, 0o600)
            os.pwrite(fd, bytes(args.file_bytes), 0)
            fds.append(fd)
        try:
            runs: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
            for r in range(args.rounds):
                for mode in MODES:
                    cpu, wall = run_mode(mode, fds, pieces, args.part, args.file_bytes,
                                         args.total)
                    runs[mode].append((cpu, wall))
                    print(f"[round {r + 1}/{args.rounds}] {mode}: "
                          f"{cpu / (args.total / GiB):.3f} CPU-s/GiB", file=sys.stderr)
        finally:
            for fd in fds:
                os.close(fd)
    gib = args.total / GiB
    return {mode: {"cpu_s_per_gib": round(statistics.median(c for c, _ in r) / gib, 3),
                   "wall_s_per_gib": round(statistics.median(w for _, w in r) / gib, 3),
                   "cpu_s_per_gib_rounds": [round(c / gib, 3) for c, _ in r]}
            for mode, r in runs.items()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                   help="where the two files go (tmpfs measures the copy alone) "
                   "[default: /dev/shm]")
    p.add_argument("--gib", type=float, default=4.0,
                   help="GiB written per mode and round [default: 4]")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved rounds; figures are medians [default: 3]")
    p.add_argument("--part", type=parse_size, default=16 * MiB, metavar="SIZE",
                   help="bytes per pwritev, as the store's part size [default: 16MiB]")
    p.add_argument("--piece", type=parse_size, default=256 * 1024, metavar="SIZE",
                   help="bytes per buffer of a part, as a request body's pieces "
                   "[default: 256KiB]")
    p.add_argument("--file-bytes", type=parse_size, default=256 * MiB, metavar="SIZE",
                   help="size of each file, written over cyclically [default: 256MiB]")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if args.part % args.piece or args.file_bytes % args.part or args.rounds < 1:
        p.error("--part must be a multiple of --piece, --file-bytes of --part, --rounds >= 1")
    args.total = max(2, int(args.gib * GiB) // args.part) * args.part
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = measure(args)
    settings = {"dir": args.dir, "total": format_size(args.total), "rounds": args.rounds,
                "part": format_size(args.part), "piece": format_size(args.piece)}
    if args.json:
        print(json.dumps({**result, "settings": settings}, indent=2))
    else:
        for mode in MODES:
            m = result[mode]
            assert isinstance(m, dict)
            print(f"{mode:16s} {m['cpu_s_per_gib']:.3f} CPU-s/GiB  "
                  f"{m['wall_s_per_gib']:.3f} wall-s/GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
