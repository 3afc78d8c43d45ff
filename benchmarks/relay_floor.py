"""What forwarding bytes from one loopback TCP connection to another costs at least.

The native batch get through the gateway (LMCache's default route, benchmarks/lmcache_compare.py)
receives each block from the object store and sends it on to the client: a hop the direct-read
route does not make. This measures that hop alone, with no HTTP, no framing, no CRC and no
Python per byte: a source process sends ``--mib`` MiB over one loopback connection, this
process forwards it over another to a sink process (each side its own process, as the gateway
is), and the relay's CPU time (``time.thread_time``, user and kernel) per GiB, two ways,
interleaved over ``--rounds`` (medians reported):

- ``copy``: ``recv_into`` one reused buffer of ``--chunk`` bytes, then ``sendall`` of what came
  (what the gateway's kernel work comes to);
- ``splice``: ``os.splice`` from the socket into a pipe and from the pipe into the other socket,
  the bytes never in user space (Linux).

On loopback the kernel still copies in both (docs/performance-log.md, issue 18, session 51).

    python benchmarks/relay_floor.py [--mib 2048] [--chunk 1MiB] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import fcntl
import multiprocessing
import os
import socket
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.floor_report import print_report
from s3kv.sizes import MiB, format_size, parse_size

MODES = ("copy", "splice")
GiB = 1 << 30
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Python 3.10+ on Linux; spelt out for older stubs)


def _source(sock: socket.socket, total: int, others: list[socket.socket]) -> None:
    for other in others:  # inherited: held open here, the relay would never see an end
        other.close()
    data = memoryview(os.urandom(4 * MiB))
    with sock:
        while total > 0:
            total -= sock.send(data[:min(len(data), total)])


def _sink(sock: socket.socket, total: int, others: list[socket.socket]) -> None:
    for other in others:
        other.close()
    buf = bytearray(4 * MiB)
    got = 0
    with sock:
        while n := sock.recv_into(buf):
            got += n
    if got != total:
        raise SystemExit(f"the sink received {got} of {total} bytes")


def _copy(src: socket.socket, dst: socket.socket, chunk: int) -> int:
    buf = bytearray(chunk)
    view = memoryview(buf)
    moved = 0
    while n := src.recv_into(buf):
        dst.sendall(view[:n])
        moved += n
    return moved


def _splice(src: socket.socket, dst: socket.socket, chunk: int) -> int:
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, chunk)
        moved = 0
        while n := os.splice(src.fileno(), w, chunk):
            left = n
            while left:
                left -= os.splice(r, dst.fileno(), left)
            moved += n
        return moved
    finally:
        os.close(r)
        os.close(w)


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        near = socket.create_connection(server.getsockname())
        far, _ = server.accept()
    return near, far


def run_mode(mode: str, total: int, chunk: int) -> tuple[float, float]:
    """The relay's CPU seconds per GiB forwarded the ``mode`` way, and GiB/s."""
    src_out, src_in = _pair()  # source -> relay
    dst_out, dst_in = _pair()  # relay -> sink
    fork = multiprocessing.get_context("fork")
    ends = [fork.Process(target=_source, args=(src_out, total, [src_in, dst_out, dst_in])),
            fork.Process(target=_sink, args=(dst_in, total, [src_out, src_in, dst_out]))]
    forward = _copy if mode == "copy" else _splice
    with src_in, dst_out:
        for end in ends:
            end.start()
        src_out.close()  # the children's now
        dst_in.close()
        started, cpu = time.perf_counter(), time.thread_time()
        moved = forward(src_in, dst_out, chunk)
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - started
        dst_out.shutdown(socket.SHUT_WR)
        for end in ends:
            end.join()
    if moved != total or any(end.exitcode for end in ends):
        raise RuntimeError(f"{mode}: forwarded {moved} of {total} bytes, or an end failed")
    return cpu / (total / GiB), total / GiB / wall


def measure(args: argparse.Namespace) -> dict[str, object]:
    total = args.mib * MiB
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    rate: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            c, g = run_mode(mode, total, args.chunk)
            cpu[mode].append(c)
            rate[mode].append(g)
            print(f"[round {r + 1}/{args.rounds}] {mode}: {c:.3f} CPU-s per GiB, {g:.2f} GiB/s",
                  file=sys.stderr)
    return {
        **{f"{m}_cpu_s_per_gib": round(statistics.median(v), 3) for m, v in cpu.items()},
        **{f"{m}_cpu_s_per_gib_rounds": [round(x, 3) for x in v] for m, v in cpu.items()},
        **{f"{m}_gib_s": round(statistics.median(v), 2) for m, v in rate.items()},
        "settings": {"mib": args.mib, "chunk": format_size(args.chunk), "rounds": args.rounds},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=2048, metavar="N",
                   help="MiB forwarded per mode and round [default: 2048]")
    p.add_argument("--chunk", type=parse_size, default=parse_size("1MiB"), metavar="SIZE",
                   help="bytes per receive (copy) or per splice into the pipe, and the pipe's "
                   "size [default: 1MiB]")
    p.add_argument("--rounds", type=int, default=3, metavar="N",
                   help="interleaved rounds; figures are medians [default: 3]")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = p.parse_args(argv)
    if min(args.mib, args.chunk, args.rounds) < 1:
        p.error("--mib, --chunk and --rounds must be positive")
    if not hasattr(os, "splice"):
        p.error("os.splice is missing: this measures Linux's loopback (Python 3.10+)")
    print_report(measure(args), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
