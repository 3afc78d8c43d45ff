"""The gateway's own work per request on its event loop, without sockets, against bare aiohttp.

On this 2-core VM a socket benchmark's CPU figures swing 2x from run to run (the kernel's copies,
wake-ups and the client share the cores). This one feeds complete, signed HTTP requests to the
real connection handlers straight from memory, in one process, and takes what the answers
say: no socket, no client, no kernel copy. Two applications are served side by side on one
event loop, each through a connection of its own:

- ``gateway``: s3kv's application as ``s3kv serve`` builds it (the S3 connection handler of
  s3kv/gateway/protocol.py, SigV4 verification unless ``--anonymous``, ``--etag fast``) over
  a real store on a ``file://`` backend in ``--shm-dir``, filled first (``--fill``, as
  gateway_ceiling.py does, so every segment lands on a recycled file);
- ``bare``: benchmarks/aiohttp_sink.py's application (the body streamed in and dropped; GETs
  written from memory).

A request's bytes are handed to the connection in ``--recv-size`` pieces, as the transport
hands over what one ``recv`` returned; the fake transport (:class:`Wire`) is the only stand-in,
and it stands for the socket only: it collects the answer and checks its status. Cases: PUT
and GET of each ``--sizes`` object through the S3 front, ``--ops`` requests per round,
``--rounds`` rounds interleaved (gateway then bare, then the other way round) after an
untimed one per case and side (the first round of a size grows the heap: fresh pages), medians
reported. Per request: the event loop's thread CPU (``time.thread_time``, the figure that
bounds a gateway's request rate), the whole process's CPU (writer threads included: the
gateway's file writes), page faults (``ru_minflt`` + ``ru_majflt``: none in a steady state,
so the loop's cost is not the kernel's), and the difference between the two applications' loop
CPU, the gateway's own work (``own_us_per_...``).

    python benchmarks/gateway_inproc.py                      # 256 KiB PUT and GET, text
    python benchmarks/gateway_inproc.py --sizes 256KiB,2MiB --rounds 7 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web

from benchmarks import aiohttp_sink
from benchmarks.gateway_ceiling import full_store_bytes
from s3kv.config import Settings
from s3kv.errors import Backpressure
from s3kv.gateway.server import start_front, tune_process
from s3kv.log import configure_logging
from s3kv.sizes import KiB, MiB, format_size, parse_size
from s3kv.store.store import BlockStore
from s3kv.wire.sigv4 import Credentials, Signer

ACCESS, SECRET = "inproc", "inproc-secret-key"
HOST = "127.0.0.1:9470"
BUCKET = "inproc"
FILL_BUCKET = "inproc-fill"
OPS = ("put", "get")
SEGMENT = 256 * MiB


class Wire(asyncio.Transport):
    """The socket side of one connection: what the server writes is parsed just enough to know
    when its answer is complete (head, then Content-Length bytes) and what its status was."""

    def __init__(self) -> None:
        super().__init__()
        self._buf = bytearray()
        self._need = -1  # bytes of the answer still to come once its head is in; -1: no head
        self._done: asyncio.Future[int] | None = None
        self._status = 0

    def expect(self) -> asyncio.Future[int]:
        self._buf.clear()
        self._need = -1
        self._done = asyncio.get_running_loop().create_future()
        return self._done

    def write(self, data: Any) -> None:
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        if self._need < 0:
            self._buf += data
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
            self._status = int(head[0].split()[1])
            length = next((int(line.split(":", 1)[1]) for line in head[1:]
                           if line.lower().startswith("content-length:")), 0)
            self._need = length - (len(self._buf) - end - 4)
            self._buf.clear()
        else:
            self._need -= n
        if self._need <= 0 and self._done is not None and not self._done.done():
            self._done.set_result(self._status)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 9470)}.get(
            name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


@dataclass
class Side:
    name: str
    protocol: Any  # aiohttp's RequestHandler (an asyncio.Protocol)
    wire: Wire = field(default_factory=Wire)

    def __post_init__(self) -> None:
        self.protocol.connection_made(self.wire)

    async def exchange(self, pieces: Sequence[bytes]) -> int:
        done = self.wire.expect()
        for piece in pieces:
            self.protocol.data_received(piece)
        return await done


class Requests:
    """Signed requests as they arrive on a socket, cut into ``recv`` pieces (made untimed)."""

    def __init__(self, recv_size: int) -> None:
        self.recv = recv_size
        self.signer = Signer(Credentials(ACCESS, SECRET, "us-east-1"))

    def make(self, method: str, path: str, body: bytes = b"") -> list[bytes]:
        headers = {"Content-Length": str(len(body))} if method == "PUT" else {}
        headers = self.signer.sign(method, HOST, path, "", headers)
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        raw = head.encode() + body
        return [raw[i:i + self.recv] for i in range(0, len(raw), self.recv)]


async def checked(side: Side, pieces: Sequence[bytes], what: str) -> None:
    status = await side.exchange(pieces)
    if status not in (200, 204):
        raise RuntimeError(f"{side.name}: {what} answered {status} {pieces[0][:60]!r}")


async def fill(store: BlockStore, nbytes: int, block_size: int, say: Any) -> None:
    """Store ``nbytes`` of ``block_size`` blocks straight into the store (untimed)."""
    await store.create_namespace(FILL_BUCKET)
    block = os.urandom(block_size)
    per_call = max(1, 16 * MiB // block_size)
    done, i = 0, 0
    while done < nbytes:
        n = min(per_call, -(-(nbytes - done) // block_size))
        batch = [(f"fill-{i + j:07d}".encode(), block) for j in range(n)]
        try:
            await store.put_many(FILL_BUCKET, batch)
        except Backpressure as exc:
            await asyncio.sleep(max(exc.retry_after, 0.05))
            continue
        i += len(batch)
        done += len(batch) * block_size
    say(f"filled {format_size(done)}")


def sample() -> tuple[float, float, float, int]:
    """(loop thread CPU s, process CPU s, wall s, page faults so far)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (time.thread_time(), time.process_time(), time.perf_counter(),
            usage.ru_minflt + usage.ru_majflt)


def measure_round(results: dict[str, list[float]], key: str, ops: int,
                  before: tuple[float, float, float, int]) -> None:
    after = sample()
    for i, what in enumerate(("loop", "process", "wall")):
        results[f"{key}_{what}_us"].append(1e6 * (after[i] - before[i]) / ops)
    results[f"{key}_faults"].append((after[3] - before[3]) / ops)


async def run_case(sides: list[Side], op: str, size: int, args: argparse.Namespace,
                   reqs: Requests, results: dict[str, list[float]], say: Any) -> None:
    body = os.urandom(size)
    objects = max(4, min(1024, parse_size(args.set_bytes) // size))

    async def write_set(side: Side) -> None:  # the objects GETs read and PUTs overwrite
        for i in range(objects):
            await checked(side, reqs.make("PUT", f"/{BUCKET}/{size}-{i}", body), "PUT")

    def requests() -> list[list[bytes]]:
        return [reqs.make("PUT", f"/{BUCKET}/{size}-{i % objects}", body) if op == "put"
                else reqs.make("GET", f"/{BUCKET}/{size}-{i % objects}")
                for i in range(args.ops)]

    for side in sides:  # untimed: the first round of a case grows the heap to its sizes
        await write_set(side)
        for pieces in requests():
            await checked(side, pieces, op.upper())
        say(f"{side.name}_{op}_{format_size(size)}: warm-up round done (untimed)")
    for r in range(args.rounds):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            if op == "get":  # written again just before a GET round (a full store evicts its
                # coldest segments)
                await write_set(side)
                await asyncio.sleep(0.2)
            batch = requests()
            key = f"{side.name}_{op}_{format_size(size)}"
            before = sample()
            for pieces in batch:
                await checked(side, pieces, op.upper())
            measure_round(results, key, args.ops, before)
            say(f"[round {r + 1}/{args.rounds}] {key}: "
                f"{results[f'{key}_loop_us'][-1]:.1f} us/op on the loop, "
                f"{results[f'{key}_faults'][-1]:.2f} page faults/op")
            await asyncio.sleep(0.2)  # the gateway's writer threads settle between runs


async def run(args: argparse.Namespace, say: Any) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="gateway-inproc-", dir=args.shm_dir))
    store: BlockStore | None = None
    runners: list[web.BaseRunner] = []
    try:
        settings = Settings.load({
            "store": f"file://{tmp}",
            **({} if args.anonymous else {"access_key": ACCESS, "secret_key": SECRET}),
            "etag": "fast", "sync_interval": 0, "capacity": args.capacity,
            "segment_size": SEGMENT, "max_block_size": max(args.sizes),
            "node_id": "inproc", "compact_threshold": 0.0,
            "max_request_memory": max(512 * MiB, 8 * max(args.sizes))})
        store = await BlockStore.open(settings)
        tune_process(settings)  # the process as `s3kv serve` sets it up
        await fill(store, full_store_bytes(args.capacity, SEGMENT) if args.fill == "auto"
                   else parse_size(args.fill), max(args.sizes), say)
        app_runner, front = await start_front(store, settings)
        bare = web.AppRunner(aiohttp_sink.make_app(), handle_signals=False, access_log=None)
        await bare.setup()
        runners = [front, app_runner, bare]
        assert front.server is not None and bare.server is not None
        sides = [Side("gateway", front.server()), Side("bare", bare.server())]
        reqs = Requests(args.recv_size)
        for side in sides:
            await checked(side, reqs.make("PUT", f"/{BUCKET}"), "CreateBucket")
        results: dict[str, list[float]] = {}
        for size in args.sizes:
            for op in OPS:
                for side in sides:
                    for what in ("loop_us", "process_us", "wall_us", "faults"):
                        results[f"{side.name}_{op}_{format_size(size)}_{what}"] = []
                await run_case(sides, op, size, args, reqs, results, say)
        return results
    finally:
        for runner in runners:
            await runner.cleanup()
        if store is not None:
            await store.close()
        shutil.rmtree(tmp, ignore_errors=True)


def summarize(results: dict[str, list[float]], args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in args.sizes:
        for op in OPS:
            tag = f"{op}_{format_size(size)}"
            for side in ("gateway", "bare"):
                for what in ("loop", "process"):
                    out[f"{side}_{what}_us_per_{tag}"] = round(
                        statistics.median(results[f"{side}_{tag}_{what}_us"]), 1)
                out[f"{side}_faults_per_{tag}"] = round(
                    statistics.median(results[f"{side}_{tag}_faults"]), 2)
            out[f"own_us_per_{tag}"] = round(
                out[f"gateway_loop_us_per_{tag}"] - out[f"bare_loop_us_per_{tag}"], 1)
    out["rounds"] = {k: [round(v, 1) for v in vs] for k, vs in results.items()}
    out["settings"] = {"sizes": [format_size(s) for s in args.sizes], "ops": args.ops,
                       "rounds": args.rounds, "recv_size": format_size(args.recv_size),
                       "fill": args.fill, "capacity": format_size(args.capacity),
                       "anonymous": args.anonymous}
    return out


def report(doc: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [f"event-loop CPU per request, no sockets ({args.ops} requests x {args.rounds} "
             "rounds, medians)", f"{'case':<14}{'gateway us':>12}{'bare us':>10}"
             f"{'own us':>10}{'gateway process us':>20}{'gateway faults':>16}"]
    for size in args.sizes:
        for op in OPS:
            tag = f"{op}_{format_size(size)}"
            lines.append(f"{tag:<14}{doc[f'gateway_loop_us_per_{tag}']:>12.1f}"
                         f"{doc[f'bare_loop_us_per_{tag}']:>10.1f}{doc[f'own_us_per_{tag}']:>10.1f}"
                         f"{doc[f'gateway_process_us_per_{tag}']:>20.1f}"
                         f"{doc[f'gateway_faults_per_{tag}']:>16.2f}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="256KiB", metavar="LIST",
                   help="object sizes of the PUT and GET cases [default: 256KiB]")
    p.add_argument("--ops", type=int, default=2000, metavar="N",
                   help="requests per round and side [default: 2000]")
    p.add_argument("--rounds", type=int, default=5, metavar="N",
                   help="interleaved rounds per case and side; figures are medians [default: 5]")
    p.add_argument("--recv-size", default="64KiB", metavar="SIZE",
                   help="bytes handed to a connection at a time, as one recv returns them "
                        "[default: 64KiB]")
    p.add_argument("--set-bytes", default="256MiB", metavar="SIZE",
                   help="bytes of the object set each case writes first and then reads or "
                        "overwrites (4 to 1024 objects) [default: 256MiB]")
    p.add_argument("--capacity", default="2GiB", metavar="SIZE",
                   help="the gateway store's --capacity [default: 2GiB]")
    p.add_argument("--fill", default="auto", metavar="SIZE",
                   help="bytes stored before the runs (untimed): auto = --capacity + the file "
                        "backend's pool of recycled files + a segment, so every segment is "
                        "written over a recycled file; 0: none [default: auto]")
    p.add_argument("--shm-dir", default="/dev/shm", metavar="DIR",
                   help="where the gateway's temporary file:// store goes [default: /dev/shm]")
    p.add_argument("--anonymous", action="store_true",
                   help="run the gateway without credentials (no SigV4 verification; the "
                        "requests stay signed): the difference is what verifying costs")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = p.parse_args(argv)
    args.sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    args.recv_size = parse_size(args.recv_size)
    args.capacity = parse_size(args.capacity)
    if args.ops < 1 or args.rounds < 1 or not args.sizes or args.recv_size < KiB:
        p.error("--ops and --rounds must be >= 1, --sizes non-empty, --recv-size >= 1KiB")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("console", "warning")

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    doc = summarize(asyncio.run(run(args, say)), args)
    print(json.dumps(doc, indent=2) if args.json else report(doc, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
