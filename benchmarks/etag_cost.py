"""What the MD5 ETag costs on the PUT path, in two measurements of one run.

1. ``reader``: a body streamed through the gateway's BodyReader (the code every S3 PUT runs)
   in process, from a socket pair, with MD5 inline per piece, MD5 pipelined into a worker
   thread (the default, ``OFFLOAD_BYTES``), and no MD5 (``--etag fast``). Reported: CPU ms
   per MiB of this process and of its event-loop thread alone (``time.thread_time``: robust on
   a shared machine), MB/s, and the longest the loop was late (a 1 ms ticker's worst).
2. ``gateway``: two ``s3kv serve`` processes on file stores, ``--etag md5`` and ``--etag fast``,
   PUTs sent alternately to each (interleaved rounds, so the shared machine's noise hits both
   alike); reported: the gateway process's CPU ms per PUT (psutil), medians over rounds.
   The gateways run anonymous on loopback, so no signature hashing is in either figure.

    python benchmarks/etag_cost.py [--sizes 256KiB,4MiB] [--puts 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import psutil

from benchmarks.harness import gateway_subprocess
from s3kv.gateway.digests import OFFLOAD_BYTES
from s3kv.gateway.payload import BodyReader
from s3kv.sizes import parse_size
from s3kv.wire.headers import index_headers

MiB = 1024 * 1024


# ---- 1. the body reader in process ---------------------------------------------------------
async def _ticker(worst: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        worst[0] = max(worst[0], time.perf_counter() - t - 0.001)


class _Chunks:
    """asyncio's StreamReader with the ``readchunk`` of aiohttp's, which BodyReader reads plain
    bodies with (pieces of up to 256 KiB: what aiohttp hands over from one socket read)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def readchunk(self) -> tuple[bytes, bool]:
        return await self._reader.read(256 * 1024), False

    async def readexactly(self, n: int) -> bytes:
        return await self._reader.readexactly(n)

    async def readline(self) -> bytes:
        return await self._reader.readline()

    async def read(self, n: int = -1) -> bytes:
        return await self._reader.read(n)

    def at_eof(self) -> bool:
        return self._reader.at_eof()


async def reader_once(size: int, md5: bool,
                      offload: int) -> tuple[float, float, float, float]:
    """(process CPU s, event-loop thread CPU s, wall s, worst loop stall s) of reading one
    ``size`` body through BodyReader (the feeding side runs on the same loop, in every mode)."""
    a, b = socket.socketpair()
    reader, a_writer = await asyncio.open_connection(sock=a)
    b_reader, writer = await asyncio.open_connection(sock=b)
    payload = os.urandom(size)

    async def feed() -> None:
        view = memoryview(payload)
        for i in range(0, size, MiB):
            writer.write(view[i:i + MiB])
            await writer.drain()
        writer.close()

    body = BodyReader(_Chunks(reader), index_headers({"content-length": str(size)}), max_size=size,
                      md5=md5, offload_bytes=offload)
    worst = [0.0]
    stop = asyncio.Event()
    tick = asyncio.create_task(_ticker(worst, stop))
    proc = psutil.Process()
    c0, l0, t0 = proc.cpu_times(), time.thread_time(), time.perf_counter()
    sender = asyncio.create_task(feed())
    n = 0
    async for piece in body:
        n += len(piece)
    result = await body.verify()
    wall = time.perf_counter() - t0
    c1, l1 = proc.cpu_times(), time.thread_time()
    stop.set()
    await tick
    await sender
    a_writer.close()
    del b_reader
    assert n == size and (result.md5_hex is not None) == md5
    return (c1.user + c1.system - c0.user - c0.system), l1 - l0, wall, worst[0]


async def reader_bench(size: int, rounds: int) -> list[dict[str, object]]:
    inline = 1 << 62  # no piece is that large: every digest inline, on the loop
    modes: dict[str, tuple[bool, int]] = {"md5 inline": (True, inline),
                                          "md5 pipelined thread": (True, OFFLOAD_BYTES),
                                          "no md5": (False, inline)}
    runs: dict[str, list[tuple[float, float, float, float]]] = {m: [] for m in modes}
    for _ in range(rounds):
        for mode, (md5, offload) in modes.items():
            runs[mode].append(await reader_once(size, md5, offload))
    rows: list[dict[str, object]] = []
    for mode, samples in runs.items():
        mib = size / MiB
        cpu = statistics.median(s[0] for s in samples)
        loop = statistics.median(s[1] for s in samples)
        wall = statistics.median(s[2] for s in samples)
        rows.append({"mode": mode, "cpu_ms_per_mib": round(cpu * 1000 / mib, 3),
                     "loop_cpu_ms_per_mib": round(loop * 1000 / mib, 3),
                     "mb_s": round(size / wall / 1e6, 1),
                     "worst_loop_stall_ms": round(max(s[3] for s in samples) * 1000, 2)})
    return rows


# ---- 2. two gateways -------------------------------------------------------------------------
@contextmanager
def gateway(mode: str, root: Path, max_block: int) -> Iterator[tuple[str, psutil.Process]]:
    """An anonymous ``s3kv serve --etag MODE`` on a file store under ``root``."""
    args = ["--etag", mode, "--log-level", "warning", "--segment-size", "64MiB",
            "--part-size", "16MiB", "--max-block-size", str(max_block), "--sync-interval", "0"]
    with gateway_subprocess(None, f"file://{root / f'store-{mode}'}", args, access=None,
                            secret=None) as gw:
        yield gw.url, psutil.Process(gw.pid)


async def put_round(session: aiohttp.ClientSession, url: str, bucket: str, size: int,
                    puts: int, concurrency: int, payload: bytes) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem, session.put(f"{url}/{bucket}/k{i:06d}-{uuid.uuid4().hex[:6]}",
                                    data=payload) as resp:
            assert resp.status == 200, await resp.text()
            await resp.read()

    await asyncio.gather(*(one(i) for i in range(puts)))
    async with session.post(f"{url}/v1/flush") as resp:  # the segment writes count too
        assert resp.status == 200, await resp.text()


async def gateway_bench(sizes: list[int], puts: int, rounds: int,
                        concurrency: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="etag-cost-") as tmp, \
            gateway("md5", Path(tmp), max(sizes)) as md5_gw, \
            gateway("fast", Path(tmp), max(sizes)) as fast_gw:
        gws = {"md5": md5_gw, "fast": fast_gw}
        async with aiohttp.ClientSession() as session:
            for url, _ in gws.values():
                async with session.put(f"{url}/bench") as resp:
                    assert resp.status == 200, await resp.text()
            for size in sizes:
                payload = os.urandom(size)
                cpu: dict[str, list[float]] = {m: [] for m in gws}
                wall: dict[str, list[float]] = {m: [] for m in gws}
                for r in range(rounds):
                    order = list(gws) if r % 2 == 0 else list(reversed(gws))
                    for mode in order:
                        url, proc = gws[mode]
                        c0, t0 = proc.cpu_times(), time.perf_counter()
                        await put_round(session, url, "bench", size, puts, concurrency, payload)
                        c1 = proc.cpu_times()
                        wall[mode].append(time.perf_counter() - t0)
                        cpu[mode].append((c1.user + c1.system - c0.user - c0.system) / puts)
                for mode in gws:
                    ms = statistics.median(cpu[mode]) * 1000
                    rows.append({"size": size, "etag": mode, "cpu_ms_per_put": round(ms, 3),
                                 "cpu_ms_per_mib": round(ms / (size / MiB), 3),
                                 "puts_per_s": round(puts / statistics.median(wall[mode]), 1)})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="256KiB,4MiB", help="PUT sizes, comma-separated")
    p.add_argument("--puts", type=int, default=200, help="PUTs per round and gateway")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    p.add_argument("--concurrency", type=int, default=4, help="PUTs in flight")
    p.add_argument("--reader-size", default="64MiB", help="body size of the reader phase")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = p.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    reader = asyncio.run(reader_bench(parse_size(args.reader_size), max(args.rounds, 5)))
    gw = asyncio.run(gateway_bench(sizes, args.puts, args.rounds, args.concurrency))
    if args.json:
        print(json.dumps({"reader": reader, "gateway": gw}, indent=2))
        return 0
    print(f"BodyReader, {args.reader_size} body (this process):")
    for row in reader:
        print(f"  {row['mode']:<22} {row['cpu_ms_per_mib']:>7} CPU ms/MiB, of which on the loop "
              f"thread {row['loop_cpu_ms_per_mib']:>7}  {row['mb_s']:>8} MB/s  worst loop stall "
              f"{row['worst_loop_stall_ms']} ms")
    print(f"gateway PUTs (gateway process CPU, median of {args.rounds} interleaved rounds):")
    for row in gw:
        print(f"  {row['size']:>9} B  --etag {row['etag']:<5} {row['cpu_ms_per_put']:>8} CPU ms/PUT"
              f"  {row['cpu_ms_per_mib']:>7} ms/MiB  {row['puts_per_s']:>7} PUT/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
