"""A bound on the backend reads in flight across all requests, served oldest request first.

Each coalesced read holds its size (at most the whole budget) and one of ``most`` slots from
start to end; with reads of up to 64 MiB, a count of reads alone would let the gateway hold
several times what a count of small reads suggests.

Reads that do not fit wait, and are let in by the age of the request they serve (``since``:
when it began), oldest first, not by when the read itself asked. A restore that streams a long
prefix asks for its later runs while it hands out the earlier ones: served in the order reads
ask, those runs would queue behind every request that came since, and a storage server that is
the bottleneck would share itself among all restores at once, so every restore took as long as
all of them together. Oldest first, each restore finishes in turn, and the mean wait falls
without costing the server a byte of throughput. The head of the queue is never passed by a
younger read that would fit, so a large read cannot starve.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class ReadBudget:
    def __init__(self, limit: int, most: int) -> None:
        """``limit``: bytes in flight; ``most``: reads in flight."""
        if limit < 1 or most < 1:
            raise ValueError("the read budget needs at least one byte and one read")
        self.limit = limit
        self.most = most
        self.used = 0
        self.reads = 0
        #: (since, arrival, bytes, future): a heap, oldest request first
        self._waiting: list[tuple[float, int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @property
    def busy(self) -> bool:
        """Whether any read holds or waits for the budget."""
        return self.reads > 0 or bool(self._waiting)

    @asynccontextmanager
    async def hold(self, nbytes: int, since: float | None = None) -> AsyncIterator[None]:
        """``since``: when the request this read serves began (``time.monotonic()``; None:
        now)."""
        n = max(0, min(nbytes, self.limit))
        await self._acquire(n, time.monotonic() if since is None else since)
        try:
            yield
        finally:
            self._release(n)

    def _fits(self, n: int) -> bool:
        return self.reads < self.most and self.used + n <= self.limit

    async def _acquire(self, n: int, since: float) -> None:
        if not self._waiting and self._fits(n):
            self.used += n
            self.reads += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (since, next(self._arrivals), n, fut)
        heapq.heappush(self._waiting, entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release(n)  # granted just as it was cancelled: hand it on
            else:
                with contextlib.suppress(ValueError):  # _grant may have dropped it already
                    self._waiting.remove(entry)
                    heapq.heapify(self._waiting)
                self._grant()  # it may have blocked smaller reads behind it
            raise

    def _release(self, n: int) -> None:
        self.used -= n
        self.reads -= 1
        self._grant()

    def _grant(self) -> None:
        while self._waiting:
            _, _, n, fut = self._waiting[0]
            if fut.done():  # cancelled while waiting
                heapq.heappop(self._waiting)
                continue
            if not self._fits(n):
                return
            heapq.heappop(self._waiting)
            self.used += n
            self.reads += 1
            fut.set_result(None)
