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
hands over what one ``recv`` returned; the fake transport (benchmarks/inproc_wire.py's
``Wire``) is the only stand-in, and it stands for the socket only: it collects the answer and
checks its status and size. Cases (``--cases``): PUT and GET of each ``--sizes`` object
through the S3 front, and the native API's batch put and streamed batch get of ``--batch``
such blocks per request (bearer token, as s3kv/client.py sends); ``--ops`` objects per round,
``--rounds`` rounds interleaved (gateway then bare, then the other way round) after an
untimed one per case and side (the first round of a size grows the heap: fresh pages), medians
reported. Per object (per block for the batch cases): the event loop's thread CPU
(``time.thread_time``, the figure that bounds a gateway's request rate), the whole process's
CPU (writer threads included: the gateway's file writes; every round starts with them idle
and is counted until they are idle again), page faults (``ru_minflt`` +
``ru_majflt``: none in a steady state, so the loop's cost is not the kernel's), and the
difference between the two applications' loop CPU, the gateway's own work
(``own_us_per_...``). With ``--calls``, one more round per case and side under cProfile gives
the Python function calls per object (``{side}_calls_per_...``, ``own_calls_per_...``): the
interpreter's work counted, the same on a fast or a slow day.

    python benchmarks/gateway_inproc.py                      # 256 KiB PUT and GET, text
    python benchmarks/gateway_inproc.py --sizes 256KiB,2MiB --rounds 7 --json
    python benchmarks/gateway_inproc.py --cases batch-put,batch-get --ops 4096
    python benchmarks/gateway_inproc.py --sizes 4KiB,256KiB --calls    # and calls per request
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web

from benchmarks import aiohttp_sink
from benchmarks.gateway_ceiling import full_store_bytes
from benchmarks.inproc_wire import ACCESS, SECRET, Requests, Side, calls_of, checked
from s3kv.config import Settings
from s3kv.errors import Backpressure
from s3kv.frames import FRAMES, frames_head
from s3kv.gateway.server import start_front, tune_process
from s3kv.log import configure_logging
from s3kv.sizes import KiB, MiB, format_size, parse_size
from s3kv.store.store import BlockStore

BUCKET = "inproc"
FILL_BUCKET = "inproc-fill"
CASES = ("put", "get", "batch-put", "batch-get")
SEGMENT = 256 * MiB


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


async def quiet(limit: float = 10.0) -> None:
    """Wait until the process's other threads (the gateway's file writers) are idle: under 2 ms
    of their CPU in 50 ms, or ``limit`` seconds. Each round starts quiet, and the writes a
    gateway round caused are counted in that round's process CPU, not in the next one's."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        others = time.process_time() - time.thread_time()
        await asyncio.sleep(0.05)
        if time.process_time() - time.thread_time() - others < 0.002:
            return


def measure_round(results: dict[str, list[float]], key: str, ops: int,
                  before: tuple[float, float, float, int],
                  sent: tuple[float, float, float, int]) -> None:
    """Loop CPU, wall time and page faults up to ``sent`` (the last answer); process CPU up to
    now (the writer threads' share of the round included)."""
    after = sample()
    for i, what in ((0, "loop"), (2, "wall")):
        results[f"{key}_{what}_us"].append(1e6 * (sent[i] - before[i]) / ops)
    results[f"{key}_process_us"].append(1e6 * (after[1] - before[1]) / ops)
    results[f"{key}_faults"].append((sent[3] - before[3]) / ops)


def tag_of(op: str, size: int) -> str:
    """A case's name in the figures' keys: ``batch_put_256KiB``."""
    return f"{op.replace('-', '_')}_{format_size(size)}"


class Case:
    """One case's requests: ``put`` / ``get`` of one object each through the S3 front, or the
    native API's ``batch-put`` / ``batch-get`` of ``--batch`` blocks per request. Figures are
    per object (per block for the batch cases)."""

    def __init__(self, op: str, size: int, args: argparse.Namespace, reqs: Requests) -> None:
        self.op, self.size, self.reqs = op, size, reqs
        self.batch = args.batch if op.startswith("batch") else 1
        self.requests_per_round = max(1, args.ops // self.batch)
        self.blocks_per_round = self.requests_per_round * self.batch
        self.objects = max(4, self.batch, min(1024, parse_size(args.set_bytes) // size))
        self.body = os.urandom(size)
        self.tag = tag_of(op, size)
        self.unit = "block" if self.batch > 1 else "op"
        # a batch put's blocks: the same pieces in every request (no copy per request)
        self._pieces = [self.body[i:i + reqs.recv] for i in range(0, size, reqs.recv)]

    def key(self, i: int) -> str:
        return f"{self.size}-{i % self.objects}"

    def _batch_put(self, first: int) -> list[bytes]:
        keys = [self.key(first + j) for j in range(self.batch)]
        head = frames_head([(k, self.size) for k in keys])
        return self.reqs.native(f"/v1/{BUCKET}/batch-put", head, self._pieces * len(keys),
                                FRAMES)

    def write_set(self) -> list[list[bytes]]:
        """The requests that write the objects GETs read and PUTs overwrite."""
        if self.op.startswith("batch"):
            return [self._batch_put(i) for i in range(0, self.objects, self.batch)]
        return [self.reqs.make("PUT", f"/{BUCKET}/{self.key(i)}", self.body)
                for i in range(self.objects)]

    def requests(self) -> list[list[bytes]]:
        n, b = self.requests_per_round, self.batch
        if self.op == "put":
            return [self.reqs.make("PUT", f"/{BUCKET}/{self.key(i)}", self.body)
                    for i in range(n)]
        if self.op == "get":
            return [self.reqs.make("GET", f"/{BUCKET}/{self.key(i)}") for i in range(n)]
        if self.op == "batch-put":
            return [self._batch_put(i * b) for i in range(n)]
        return [self.reqs.native(f"/v1/{BUCKET}/batch-get", json.dumps(
            {"keys": [self.key(i * b + j) for j in range(b)]}).encode(), [], "application/json")
            for i in range(n)]

    def least(self) -> int:
        """Body bytes an answer must have: every block of a batch get."""
        return self.batch * self.size if self.op == "batch-get" else 0

    async def send(self, side: Side, batch: list[list[bytes]], least: int | None = None) -> int:
        """Send each request, once more after a pause for every 503 SlowDown (the gateway's
        writers behind: nothing paces this loop as a network would); how many there were."""
        least, slowed = self.least() if least is None else least, 0
        for pieces in batch:
            while await checked(side, pieces, self.op, least, slow_down=True) == 503:
                slowed += 1
                await asyncio.sleep(0.05)
        return slowed


async def run_case(sides: list[Side], case: Case, args: argparse.Namespace,
                   results: dict[str, list[float]], say: Any) -> None:
    for side in sides:  # untimed: the first round of a case grows the heap to its sizes
        await case.send(side, case.write_set(), least=0)
        await case.send(side, case.requests())
        say(f"{side.name}_{case.tag}: warm-up round done (untimed)")
    for r in range(args.rounds):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            if case.op.endswith("get"):  # written again just before a GET round (a full
                # store evicts its coldest segments)
                await case.send(side, case.write_set(), least=0)
            batch = case.requests()
            key = f"{side.name}_{case.tag}"
            await quiet()
            before = sample()
            results[f"{key}_slowed"].append(await case.send(side, batch))
            sent = sample()
            await quiet()
            measure_round(results, key, case.blocks_per_round, before, sent)
            say(f"[round {r + 1}/{args.rounds}] {key}: "
                f"{results[f'{key}_loop_us'][-1]:.1f} us/{case.unit} on the loop, "
                f"{results[f'{key}_faults'][-1]:.2f} page faults/{case.unit}, "
                f"{results[f'{key}_slowed'][-1]:.0f} slow-downs")
    if args.calls:
        for side in sides:  # one more round each under cProfile, untimed: calls per object
            if case.op.endswith("get"):
                await case.send(side, case.write_set(), least=0)
            batch = case.requests()
            calls = await calls_of(functools.partial(case.send, side, batch))
            results[f"{side.name}_{case.tag}_calls"] = [calls / case.blocks_per_round]


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
        # aiohttp's handler on every request: the plain lane (plainlane.py) reads a real
        # socket, which this harness replaces
        app_runner, front = await start_front(store, settings, lane=False)
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
            for op in args.cases:
                case = Case(op, size, args, reqs)
                for side in sides:
                    for what in ("loop_us", "process_us", "wall_us", "faults", "slowed"):
                        results[f"{side.name}_{case.tag}_{what}"] = []
                await run_case(sides, case, args, results, say)
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
        for op in args.cases:
            tag = tag_of(op, size)
            for side in ("gateway", "bare"):
                for what in ("loop", "process"):
                    out[f"{side}_{what}_us_per_{tag}"] = round(
                        statistics.median(results[f"{side}_{tag}_{what}_us"]), 1)
                out[f"{side}_faults_per_{tag}"] = round(
                    statistics.median(results[f"{side}_{tag}_faults"]), 2)
                out[f"{side}_slow_downs_{tag}"] = int(sum(results[f"{side}_{tag}_slowed"]))
            out[f"own_us_per_{tag}"] = round(
                out[f"gateway_loop_us_per_{tag}"] - out[f"bare_loop_us_per_{tag}"], 1)
            if args.calls:
                for side in ("gateway", "bare"):
                    out[f"{side}_calls_per_{tag}"] = round(results[f"{side}_{tag}_calls"][0], 1)
                out[f"own_calls_per_{tag}"] = round(
                    out[f"gateway_calls_per_{tag}"] - out[f"bare_calls_per_{tag}"], 1)
    out["rounds"] = {k: [round(v, 1) for v in vs] for k, vs in results.items()}
    out["settings"] = {"sizes": [format_size(s) for s in args.sizes], "cases": args.cases,
                       "ops": args.ops, "batch": args.batch,
                       "rounds": args.rounds, "recv_size": format_size(args.recv_size),
                       "fill": args.fill, "capacity": format_size(args.capacity),
                       "anonymous": args.anonymous, "calls": args.calls}
    return out


def report(doc: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [f"event-loop CPU per object (per block for the batch cases), no sockets "
             f"({args.ops} objects x {args.rounds} rounds, medians)",
             f"{'case':<20}{'gateway us':>12}{'bare us':>10}{'own us':>10}"
             f"{'gateway process us':>20}{'gateway faults':>16}"]
    for size in args.sizes:
        for op in args.cases:
            tag = tag_of(op, size)
            lines.append(f"{tag:<20}{doc[f'gateway_loop_us_per_{tag}']:>12.1f}"
                         f"{doc[f'bare_loop_us_per_{tag}']:>10.1f}{doc[f'own_us_per_{tag}']:>10.1f}"
                         f"{doc[f'gateway_process_us_per_{tag}']:>20.1f}"
                         f"{doc[f'gateway_faults_per_{tag}']:>16.2f}")
            if args.calls:
                lines.append(f"{'':<20}Python calls per object: gateway "
                             f"{doc[f'gateway_calls_per_{tag}']:.0f}, bare "
                             f"{doc[f'bare_calls_per_{tag}']:.0f}, own "
                             f"{doc[f'own_calls_per_{tag}']:.0f}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="256KiB", metavar="LIST",
                   help="object sizes of the PUT and GET cases [default: 256KiB]")
    p.add_argument("--cases", default="put,get", metavar="LIST",
                   help="which of put, get (one object per request through the S3 front), "
                        "batch-put, batch-get (the native API, --batch blocks per request) "
                        "[default: put,get]")
    p.add_argument("--ops", type=int, default=2000, metavar="N",
                   help="objects per round and side: requests for put and get, blocks (in "
                        "requests of --batch) for the batch cases [default: 2000]")
    p.add_argument("--batch", type=int, default=64, metavar="N",
                   help="blocks per native batch request [default: 64]")
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
    p.add_argument("--calls", action="store_true",
                   help="after each case's timed rounds, one more round per side under cProfile "
                        "(untimed): Python function calls per object, a figure of the "
                        "interpreter's work that does not move with the machine's speed")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = p.parse_args(argv)
    args.sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    args.cases = [c for c in args.cases.split(",") if c]
    if not args.cases or not set(args.cases) <= set(CASES):
        p.error(f"--cases: a comma-separated list of {', '.join(CASES)}")
    args.recv_size = parse_size(args.recv_size)
    args.capacity = parse_size(args.capacity)
    if min(args.ops, args.rounds, args.batch) < 1 or not args.sizes or args.recv_size < KiB:
        p.error("--ops, --rounds and --batch must be >= 1, --sizes non-empty, "
                "--recv-size >= 1KiB")
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
