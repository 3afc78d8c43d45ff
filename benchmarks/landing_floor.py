"""What a block received into its segment costs at least, against a block received and dropped.

The gateway ceiling's native batch put (benchmarks/gateway_ceiling.py) compares the gateway,
which receives each block straight into its place in a segment (a mapping of a file the store
recycles: memory no cache holds) and checksums it, with a bare server that receives into one
buffer it reuses (memory the CPU's cache holds) and drops the bytes. This measures that
difference alone, with no HTTP and no Python per byte: one loopback TCP connection, a sender
thread writing ``--block``-sized blocks, and the receiving thread's CPU time
(``time.thread_time``) per block, four ways, interleaved over ``--rounds`` (medians reported):

- ``recv_reused``: ``recv_into`` one reused buffer (the bare server's case);
- ``recv_mapped``: ``recv_into`` successive windows of a populated file mapping in ``--dir``
  (the store's case: every window is memory not touched for a while);
- ``crc_after``: ``recv_mapped``, then each block's CRC-32 (``layout.checksum``, zlib-ng) once
  ``--lag`` more bytes have been received (what a checksum worker does, reading it back);
- ``crc_at_once``: ``recv_mapped``, each block's CRC-32 right after its last byte.

The differences, ``recv_mapped - recv_reused`` (the copy into memory not in the cache) and the
CRC's cost, are a floor under what the gateway spends per block beyond the bare server, however
lean its Python (docs/performance-log.md, issue 17, session 39).

    python benchmarks/landing_floor.py [--dir /dev/shm] [--block 256KiB] [--mib 2048] [--json]
"""

from __future__ import annotations

import argparse
import mmap
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.floor_report import print_report
from s3kv.sizes import MiB, format_size, parse_size
from s3kv.store.layout import checksum

MODES = ("recv_reused", "recv_mapped", "crc_after", "crc_at_once")


def _send(sock: socket.socket, block: bytes, count: int) -> None:
    for _ in range(count):
        sock.sendall(block)


def _receive_into(conn: socket.socket, window: memoryview) -> None:
    while window:
        n = conn.recv_into(window)
        if not n:
            raise ConnectionError("the sender closed early")
        window = window[n:]


def run_mode(mode: str, mapped: memoryview, block: int, count: int, lag: int) -> float:
    """The receiving thread's CPU seconds per block for ``count`` blocks, the ``mode`` way."""
    reused = memoryview(bytearray(block))
    slots = len(mapped) // block
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        conn, _ = server.accept()
    payload = os.urandom(block)
    thread = threading.Thread(target=_send, args=(sender, payload, count), daemon=True)
    behind = max(1, lag // block)  # crc_after: the block checksummed trails by this many
    window: Callable[[int], memoryview] = (
        (lambda k: reused) if mode == "recv_reused"
        else (lambda k: mapped[(k % slots) * block:(k % slots + 1) * block]))
    with sender, conn:
        thread.start()
        cpu = time.thread_time()
        for k in range(count):
            _receive_into(conn, window(k))
            if mode == "crc_at_once":
                checksum(window(k))
            elif mode == "crc_after" and k >= behind:
                checksum(window(k - behind))
        if mode == "crc_after":
            for k in range(max(0, count - behind), count):
                checksum(window(k))
        cpu = time.thread_time() - cpu
        thread.join()
    return cpu / count


def measure(args: argparse.Namespace) -> dict[str, object]:
    count = max(1, args.mib * MiB // args.block)
    file_bytes = max(args.block, args.file_bytes // args.block * args.block)
    fd, name = tempfile.mkstemp(prefix="landing-floor-", dir=args.dir)
    try:
        os.ftruncate(fd, file_bytes)
        with mmap.mmap(fd, file_bytes) as mm:
            mapped = memoryview(mm)
            try:
                for at in range(0, file_bytes, mmap.PAGESIZE):  # populated, as recycled files
                    mapped[at] = 1
                rounds: dict[str, list[float]] = {m: [] for m in MODES}
                for r in range(args.rounds):
                    for mode in MODES:
                        us = run_mode(mode, mapped, args.block, count, args.lag) * 1e6
                        rounds[mode].append(us)
                        print(f"[round {r + 1}/{args.rounds}] {mode}: {us:.1f} us of CPU per "
                              "block", file=sys.stderr)
            finally:
                mapped.release()
    finally:
        os.close(fd)
        os.unlink(name)
    med = {m: statistics.median(v) for m, v in rounds.items()}
    return {
        **{f"{m}_us_per_block": round(med[m], 2) for m in MODES},
        **{f"{m}_us_per_block_rounds": [round(x, 2) for x in v] for m, v in rounds.items()},
        "copy_extra_us_per_block": round(med["recv_mapped"] - med["recv_reused"], 2),
        "crc_after_extra_us_per_block": round(med["crc_after"] - med["recv_mapped"], 2),
        "crc_at_once_extra_us_per_block": round(med["crc_at_once"] - med["recv_mapped"], 2),
        "settings": {"block": format_size(args.block), "blocks": count,
                     "file_bytes": format_size(file_bytes), "lag": format_size(args.lag),
                     "rounds": args.rounds, "dir": args.dir},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default="/dev/shm",
                   help="where the mapped file goes (tmpfs, as the ceiling's stores) "
                   "[default: /dev/shm]")
    p.add_argument("--block", type=parse_size, default=parse_size("256KiB"), metavar="SIZE",
                   help="bytes per block [default: 256KiB]")
    p.add_argument("--mib", type=int, default=2048, metavar="N",
                   help="MiB received per mode and round [default: 2048]")
    p.add_argument("--file-bytes", type=parse_size, default=parse_size("256MiB"),
                   metavar="SIZE", help="size of the mapped file the blocks go round "
                   "(larger than the CPU's caches) [default: 256MiB]")
    p.add_argument("--lag", type=parse_size, default=parse_size("4MiB"), metavar="SIZE",
                   help="crc_after: bytes received after a block before its CRC [default: "
                   "4MiB, a few socket reads of other connections]")
    p.add_argument("--rounds", type=int, default=5, metavar="N",
                   help="interleaved rounds; figures are medians [default: 5]")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = p.parse_args(argv)
    if min(args.block, args.mib, args.file_bytes, args.rounds) < 1 or args.lag < 0:
        p.error("--block, --mib, --file-bytes and --rounds must be positive, --lag at least 0")
    print_report(measure(args), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
