"""Part uploads paced by read demand: up to ``most`` in flight, ``reading`` while reads wait.

A restore reads a prefix from the same storage servers the write stream uploads parts to. With
several 16 MiB parts in flight, a ranged read queues behind them at the server, and the read's
latency (the engine waiting to resume a prompt) pays for the write stream's throughput. On the
KV workload with a one-core RGW, a fixed single part in flight cut the fresh pass's P95 read by
about 40 % and cost about 5 % of the tokens (docs/tuning.md): reads matter more, but only while
there are any. So the limit follows the reads: while a backend read of this gateway is in
flight, at most ``reading`` uploads start (uploads already running finish); otherwise up to
``most``. A waiting upload looks again when an upload ends, or every ``recheck`` seconds (the
reads end on their own; this module does not hear of it).

The interface is ``asyncio.Semaphore``'s (``acquire``, ``release``, ``async with``), which is
all :class:`~s3kv.backends.multipart.MultipartUpload` and the writer use.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

#: how often an upload held back by reads looks whether they are over
RECHECK = 0.02


class UploadSlots:
    def __init__(self, most: int, reading: int, reads_waiting: Callable[[], bool], *,
                 recheck: float = RECHECK) -> None:
        if not 1 <= reading <= most:
            raise ValueError("need 1 <= parts in flight while reading <= max parts in flight")
        self.most = most
        self.reading = reading
        self._reads_waiting = reads_waiting
        self._recheck = recheck
        self.in_flight = 0
        self.held_back = 0  # uploads that waited because of reads (a counter, for figures)
        self._freed = asyncio.Event()

    def limit(self) -> int:
        """Uploads that may run now."""
        return self.reading if self._reads_waiting() else self.most

    async def acquire(self) -> bool:
        waited_for_reads = False
        while self.in_flight >= self.limit():
            if self.in_flight < self.most and not waited_for_reads:
                waited_for_reads = True
                self.held_back += 1
            self._freed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._recheck if self.limit() < self.most
                                           else None):
                    await self._freed.wait()
        self.in_flight += 1
        return True

    def release(self) -> None:
        self.in_flight -= 1
        self._freed.set()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()
