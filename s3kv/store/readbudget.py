"""A bound on the bytes of backend reads in flight, across all requests.

Each coalesced read holds its size (at most the whole budget) from start to end; reads that do
not fit wait their turn, first come first served. With reads of up to 64 MiB, a count of reads
alone would let the gateway hold several times what a count of small reads suggests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class ReadBudget:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the read budget must be at least one byte")
        self.limit = limit
        self.used = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def busy(self) -> bool:
        """Whether any read holds or waits for the budget."""
        return self.used > 0 or bool(self._waiting)

    @asynccontextmanager
    async def hold(self, nbytes: int) -> AsyncIterator[None]:
        n = max(0, min(nbytes, self.limit))
        await self._acquire(n)
        try:
            yield
        finally:
            self._release(n)

    async def _acquire(self, n: int) -> None:
        if not self._waiting and self.used + n <= self.limit:
            self.used += n
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (n, fut)
        self._waiting.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release(n)  # granted just as it was cancelled: hand it on
            else:
                with contextlib.suppress(ValueError):  # _grant may have dropped it already
                    self._waiting.remove(entry)
                self._grant()  # it may have blocked smaller reads behind it
            raise

    def _release(self, n: int) -> None:
        self.used -= n
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self.used + self._waiting[0][0] <= self.limit:
            n, fut = self._waiting.popleft()
            if fut.done():  # cancelled while waiting
                continue
            self.used += n
            fut.set_result(None)
