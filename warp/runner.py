"""One benchmark client: workers generating operations, recording each, until the deadline.

``concurrent`` workers each run one operation at a time (Warp's ``--concurrent``). At the
deadline, on ``--autoterm`` stability or on Ctrl-C, operations still in flight are cancelled
and not recorded (as Warp does); everything completed is in the record file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from s3kv.clock import now_ns, now_s
from s3kv.wire.sigv4 import Credentials
from warp.benchmarks.base import Benchmark, Context
from warp.config import BenchConfig
from warp.payload import PayloadSource
from warp.recorder import LiveStats, Recorder
from warp.records import RecordWriter
from warp.s3 import S3Client


@dataclass
class RunResult:
    records: Path | None
    stats: LiveStats
    interrupted: bool
    started_ns: int
    ended_ns: int
    cleaned: int = 0


Progress = Callable[[LiveStats, float], None]
#: called once the client is ready (set up); returns the wall-clock time to start at
StartGate = Callable[[], Awaitable[float]]


async def run_client(config: BenchConfig, bench: Benchmark, records: Path | None, *,
                     start_at: float = 0.0, start_gate: StartGate | None = None,
                     progress: Progress | None = None,
                     comment: str = "", handle_sigint: bool = True,
                     creds: Credentials | None = None) -> RunResult:
    """Prepare, wait for ``start_at`` (wall clock, for synchronized clients), run, clean up.

    With ``start_gate``, the start time is asked for once the client is set up (a sweep's
    coordinator starts every client of a phase at once when all are ready).
    """
    creds = creds or Credentials.from_environment(config.region)
    payload = PayloadSource(config.seed)
    in_flight = config.parts_in_flight if config.multipart(config.obj_size) else 1
    client = S3Client(config.endpoints, creds, payload,
                      connections=config.concurrent * in_flight + 4,
                      retries=config.retries, timeout=config.request_timeout)
    writer = RecordWriter(records) if records is not None else None
    recorder = Recorder(config, writer)
    ctx = Context(config=config, client=client, payload=payload, recorder=recorder,
                  rng=random.Random())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if handle_sigint:
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    started = ended = now_ns()
    cleaned = 0
    try:
        await bench.setup(ctx)
        if start_gate is not None and not stop.is_set():
            start_at = await start_gate()
        delay = start_at - now_s()
        if delay > 0 and not stop.is_set():
            await _wait(stop, delay)
        recorder.recording = True
        started = now_ns()
        if not stop.is_set():
            await _run_workers(ctx, bench, stop, progress, started / 1e9)
        ended = now_ns()
        recorder.recording = False
        if config.cleanup and not config.noclear:
            cleaned = await client.delete_prefix(config.bucket, config.run_prefix)
    finally:
        if handle_sigint:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
        if writer is not None:
            writer.close(comment or "s3kv warp client " + json.dumps(config.to_dict()))
        await client.close()
    return RunResult(records, recorder.stats, stop.is_set(), started, ended, cleaned)


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _run_workers(ctx: Context, bench: Benchmark, stop: asyncio.Event,
                       progress: Progress | None, t0: float) -> None:
    config = ctx.config

    async def worker(thread: int) -> None:
        while not stop.is_set():
            if not await bench.run_op(ctx, thread):
                return

    tasks = [asyncio.create_task(worker(t)) for t in range(config.concurrent)]
    deadline = time.monotonic() + config.duration
    stopper = asyncio.create_task(stop.wait())
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or stop.is_set() or all(t.done() for t in tasks):
                break
            await asyncio.wait([*tasks, stopper], timeout=min(0.5, left),
                               return_when=asyncio.FIRST_EXCEPTION)
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]  # a bug, not an S3 error
            if progress is not None:
                progress(ctx.recorder.stats, now_s() - t0)
            if config.autoterm and ctx.recorder.stats.stable(config.autoterm_dur,
                                                             config.autoterm_pct, t0 + 2):
                break
    finally:
        stopper.cancel()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
    if progress is not None:
        progress(ctx.recorder.stats, now_s() - t0)


async def prepare_object_set(config: BenchConfig, bench: Benchmark,
                             creds: Credentials | None = None) -> None:
    """Upload the object set of ``config`` once (a sweep shares it between GET phases)."""
    creds = creds or Credentials.from_environment(config.region)
    payload = PayloadSource(config.seed)
    in_flight = config.parts_in_flight if config.multipart(config.obj_size) else 1
    async with S3Client(config.endpoints, creds, payload,
                        connections=config.concurrent * in_flight + 4) as client:
        ctx = Context(config=config, client=client, payload=payload,
                      recorder=Recorder(config, None), rng=random.Random())
        await bench.setup(ctx)


async def delete_prefix(config: BenchConfig, prefix: str,
                        creds: Credentials | None = None) -> int:
    creds = creds or Credentials.from_environment(config.region)
    async with S3Client(config.endpoints, creds, PayloadSource(config.seed, base_size=4096),
                        connections=16) as client:
        return await client.delete_prefix(config.bucket, prefix)
