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

A read's bytes also stay counted after it ends, for as long as the buffers they were received
into live (``held``, at most ``held_limit``): a block read for a client that does not take it
(a stalled GET, a batch get whose reader stopped reading) holds its memory until its response
is sent or cut, and until then later reads wait. Without that, each stalled response held a
block (up to 64 MiB) or a batch get's read-ahead (up to 256 MiB) beyond any bound: 100 GETs of
32 MiB objects whose clients stopped reading took a gateway on an S3 backend past 3.4 GiB. The
read gets a :class:`Held` for its bytes; each buffer it fills takes its share with
:meth:`Held.take`, given back when the buffer is freed (``weakref.finalize``); what no buffer
took (gaps, a backend that lends memory it maps, blocks never read) goes back when the read
ends. A block a codec decodes is new memory of the same kind: it is charged
(:meth:`ReadBudget.charge`) until freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np


class ReadBudget:
    def __init__(self, limit: int, most: int, held_limit: int = 0) -> None:
        """``limit``: bytes in flight; ``most``: reads in flight; ``held_limit``: bytes of read
        buffers alive, in flight or waiting to be sent (0: ``limit``)."""
        if limit < 1 or most < 1 or held_limit < 0:
            raise ValueError("the read budget needs at least one byte and one read")
        self.limit = limit
        self.most = most
        self.held_limit = held_limit or limit
        self.used = 0
        self.reads = 0
        #: bytes of reads in flight and of the buffers they filled that are still alive
        self.held = 0
        #: (since, arrival, bytes, future): a heap, oldest request first
        self._waiting: list[tuple[float, int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0

    @property
    def busy(self) -> bool:
        """Whether any read holds or waits for the budget."""
        return self.reads > 0 or bool(self._waiting)

    @asynccontextmanager
    async def hold(self, nbytes: int, since: float | None = None) -> AsyncIterator[Held]:
        """``since``: when the request this read serves began (``time.monotonic()``; None:
        now). The :class:`Held` is the read's bytes, for its buffers to take."""
        n = max(0, min(nbytes, self.limit, self.held_limit))
        await self._acquire(n, time.monotonic() if since is None else since)
        held = Held(self, n)
        try:
            yield held
        finally:
            self._end_read(n, held.settle())

    def let_go(self, n: int) -> None:
        """``n`` held bytes are free again (a buffer was freed, or a read ended); safe from
        any thread and from a finalizer (waiters are let in by a callback of the loop)."""
        if threading.get_ident() != self._thread and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self._loop.call_soon_threadsafe(self.let_go, n)
            return
        self.held -= n
        if self._waiting and self._loop is not None:
            self._loop.call_soon(self._grant)

    def charge(self, buffer: object, n: int) -> None:
        """``buffer`` (weak-referenceable) holds ``n`` bytes made from a read, a decoded block,
        until it is freed. Counted at once and never waited for: a read that holds bytes and
        waits for more could wait on another doing the same. Reads asked for later wait until
        it is freed, so held memory passes ``held_limit`` by at most what the reads already
        let in decode into. Called on the loop."""
        self.held += n
        weakref.finalize(buffer, self.let_go, n)

    def charged(self, data: bytes) -> memoryview:
        """``data`` (a block just decoded) as a view, charged (:meth:`charge`) until the view
        and every view of it are freed."""
        owner = np.frombuffer(data, np.uint8)  # no copy; bytes cannot be weakly referenced
        self.charge(owner, len(data))
        return memoryview(owner.data).cast("B")

    def _fits(self, n: int) -> bool:
        return (self.reads < self.most and self.used + n <= self.limit
                and self.held + n <= self.held_limit)

    async def _acquire(self, n: int, since: float) -> None:
        if self._loop is None:
            self._loop, self._thread = asyncio.get_running_loop(), threading.get_ident()
        if not self._waiting and self._fits(n):
            self._admit(n)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (since, next(self._arrivals), n, fut)
        heapq.heappush(self._waiting, entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._end_read(n, n)  # granted just as it was cancelled: hand it on
            else:
                with contextlib.suppress(ValueError):  # _grant may have dropped it already
                    self._waiting.remove(entry)
                    heapq.heapify(self._waiting)
                self._grant()  # it may have blocked smaller reads behind it
            raise

    def _end_read(self, n: int, unheld: int) -> None:
        """A read of ``n`` bytes is over; ``unheld`` of them are in no buffer that lives on."""
        self.used -= n
        self.reads -= 1
        self.let_go(unheld)

    def _admit(self, n: int) -> None:
        self.used += n
        self.held += n
        self.reads += 1

    def _grant(self) -> None:
        while self._waiting:
            _, _, n, fut = self._waiting[0]
            if fut.done():  # cancelled while waiting
                heapq.heappop(self._waiting)
                continue
            if not self._fits(n):
                return
            heapq.heappop(self._waiting)
            self._admit(n)
            fut.set_result(None)


class Held:
    """The bytes one read was let in with, until the buffers they went into are freed."""

    def __init__(self, budget: ReadBudget, n: int) -> None:
        self._budget = budget
        self._pool = n  # not yet taken by a buffer

    def take(self, buffer: object, length: int) -> None:
        """``buffer`` (weak-referenceable) holds ``length`` of the read's bytes until it is
        freed (a buffer beyond the read's bytes, as a retry makes, takes what is left)."""
        taken = min(length, self._pool)
        if taken:
            self._pool -= taken
            weakref.finalize(buffer, self._budget.let_go, taken)

    def settle(self) -> int:
        """The read is over: what no buffer took (returned, for the budget to let go of)."""
        rest, self._pool = self._pool, 0
        return rest
