"""One coalesced ranged read, handed out block by block as its bytes arrive.

A run (``reader.ReadRun``) covers adjacent blocks of one segment. Its bytes are copied, as the
backend delivers them, into one buffer per block; a block's future resolves as soon as its last
byte is in, so the first block of a 64 MiB read goes out while the rest is still on its way,
and no buffer is larger than a block. Gaps between blocks (alignment) are skipped.

A backend that can receive in place (the S3 backend's ranged reads, ``fastget.Landing``) asks
``space`` where the next bytes belong and reports them with ``landed``: they are received
straight into the block's buffer, no copy at all. A backend that lends the run as a view of its
own memory (a memory map) hands it to ``lend`` instead: each block is then a view of that view.

A retried read starts again from the run's first byte: blocks already complete are kept and
their bytes skipped. When the read ends (complete, short or failed), ``finish`` resolves every
block still waiting with None (a miss); the caller has logged why.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import Counter
from typing import Any

import numpy as np

from s3kv.store.index import Location
from s3kv.store.readbudget import Held
from s3kv.store.reader import ReadRun
from s3kv.store.stats import StoreStats

Extent = tuple[int, int]  # (offset in the segment, length)
#: blocks at least this large get a buffer the backend fills without zeroing it first
UNZEROED_MIN = 1024 * 1024


class _Small(bytearray):
    """A small block's buffer (a bytearray that a finalizer can watch)."""


def block_buffer(length: int, held: Held | None = None) -> memoryview:
    """A writable buffer for one block's bytes, contents undefined (the read fills all of it
    before the block is handed out); it takes its share of ``held`` (the read budget's bytes,
    readbudget.py) until it is freed. ``bytearray(n)`` zeroes its memory (a ``memset`` of the
    whole block, or, fresh from the kernel, a fault and a zeroed page per 4 KiB); a numpy array
    is not zeroed, and numpy asks for transparent huge pages for large arrays. 32 MiB buffers
    allocated and filled in a loop here: 0.56 CPU-s per GiB as bytearrays, 0.15 as arrays."""
    buffer: bytearray | np.ndarray[Any, np.dtype[np.uint8]] = (
        _Small(length) if length < UNZEROED_MIN else np.empty(length, dtype=np.uint8))
    if held is not None:
        held.take(buffer, length)
    if isinstance(buffer, bytearray):
        return memoryview(buffer)
    return memoryview(buffer.data).cast("B")


class RunRead:
    def __init__(self, plan: ReadRun, since: float | None = None) -> None:
        """``since``: when the request this run serves began (``time.monotonic()``; None:
        now); the read budget lets the oldest requests' runs in first."""
        self.plan = plan
        self.since = time.monotonic() if since is None else since
        loop = asyncio.get_running_loop()
        # one buffer per distinct block: a key asked twice shares it
        self._wanted: Counter[Extent] = Counter((loc.offset, loc.length)
                                                for _, loc in plan.members)
        self._extents = sorted(self._wanted)
        self._blocks: dict[Extent, asyncio.Future[memoryview | None]] = {
            e: loop.create_future() for e in self._extents}
        self.task: asyncio.Task[None] | None = None
        #: (segment offset, tie-break, the member's offset, future): ``upto`` callers waiting
        #: for the read to pass an offset inside the member being received
        self._waiters: list[tuple[int, int, int, asyncio.Future[memoryview | None]]] = []
        self._tie = itertools.count()
        #: whether the backend lent the run (its blocks are views of memory the backend maps)
        self.lent = False
        #: the read budget's bytes for this run's buffers (set while the read holds them)
        self.held: Held | None = None
        self.restart()

    @property
    def size(self) -> int:
        return self.plan.end - self.plan.start

    def restart(self) -> None:
        """The backend starts sending from the run's first byte (again)."""
        self._pos = self.plan.start
        self._next = 0  # index in _extents of the first block not yet passed
        self._buf: memoryview | None = None

    def feed(self, view: memoryview) -> None:
        """The next bytes of the run, in order (a backend sink)."""
        while len(view) and self._next < len(self._extents):
            off, length = self._extents[self._next]
            if self._pos < off:  # a gap: skip it
                skip = min(off - self._pos, len(view))
                view = view[skip:]
                self._pos += skip
                continue
            done = self._pos - off
            take = min(length - done, len(view))
            fut = self._blocks.get((off, length))  # None: complete and taken already
            if fut is not None and not fut.done():  # a retry: complete blocks are skipped
                if self._buf is None:
                    self._buf = block_buffer(length, self.held)
                # through a memoryview: one copy (a bytearray's slice assignment copies a
                # value that is not a bytearray into a temporary one first)
                self._buf[done:done + take] = view[:take]
            view = view[take:]
            self._advance(take)

    def space(self) -> memoryview | None:
        """The rest of the block the next bytes belong to, to be received in place (then
        ``landed``); None where they must come through ``feed`` (a gap, a block already
        complete on a retry, the end of the run)."""
        if self._next >= len(self._extents):
            return None
        off, length = self._extents[self._next]
        fut = self._blocks.get((off, length))
        if self._pos < off or fut is None or fut.done():
            return None
        if self._buf is None:
            self._buf = block_buffer(length, self.held)
        return self._buf[self._pos - off:]

    def landed(self, n: int) -> None:
        """``n`` bytes were received into the last ``space``."""
        self._advance(n)

    def _advance(self, n: int) -> None:
        """``n`` bytes of the current block are in: at its end, hand it out, go to the next."""
        off, length = self._extents[self._next]
        self._pos += n
        while self._waiters and self._waiters[0][0] <= self._pos:
            end, _, _, waiter = heapq.heappop(self._waiters)  # the member is the current one
            if not waiter.done():
                waiter.set_result(None if self._buf is None else self._buf[:end - off])
        if self._pos == off + length:
            fut = self._blocks.get((off, length))
            if fut is not None and not fut.done():
                fut.set_result(self._buf)
            self._buf = None
            self._next += 1

    def lend(self, view: memoryview) -> None:
        """The whole run as one view (fewer bytes only at the object's end): every block still
        waiting becomes a view of it; a block the view does not cover stays waiting."""
        self.lent = True
        for off, length in self._extents:
            fut = self._blocks.get((off, length))
            inner = off - self.plan.start
            if fut is not None and not fut.done() and inner + length <= len(view):
                fut.set_result(view[inner:inner + length])
        for end, _, off, waiter in self._waiters:
            if not waiter.done() and end - self.plan.start <= len(view):
                waiter.set_result(view[off - self.plan.start:end - self.plan.start])
        self._next = len(self._extents)

    def finish(self) -> None:
        """The read is over: blocks still incomplete are misses."""
        self._buf = None
        for fut in self._blocks.values():
            if not fut.done():
                fut.set_result(None)
        for _, _, _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def block(self, loc: Location) -> memoryview | None:
        """The raw (unverified) bytes of one member, once they are in; None: not read.
        Each member is taken once: the run lets go of a block's buffer after its last taker."""
        extent = (loc.offset, loc.length)
        fut = self._blocks[extent]
        data = await asyncio.shield(fut)
        self._wanted[extent] -= 1
        if self._wanted[extent] == 0:
            del self._blocks[extent]
        return data

    async def upto(self, loc: Location, end: int) -> memoryview | None:
        """Without taking it (a run read for any number of takers: a read-ahead window, whose
        one member is all of its bytes), the first bytes of member ``loc``, up to segment
        offset ``end``, as soon as they are in, before the rest of the member: the window's
        blocks go out as it arrives, not once all of it has. None: the read ended short of
        ``end``. The view stays valid (a retry receives into a new buffer)."""
        fut = self._blocks[(loc.offset, loc.length)]
        if fut.done():
            whole = fut.result()
            return None if whole is None else whole[:end - loc.offset]
        if self._buf is not None and self._pos >= end:  # in the block being received
            return self._buf[:end - loc.offset]
        waiter: asyncio.Future[memoryview | None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (end, next(self._tie), loc.offset, waiter))
        return await asyncio.shield(waiter)

    def cancel(self) -> None:
        """Stop the read, unless every block is in already (then it is only finishing its
        response and bookkeeping)."""
        if (self.task is not None and not self.task.done()
                and self._next < len(self._extents)):
            self.task.cancel()


class RunSink:
    """A run's bytes as the backend streams them, counted as they arrive (a request may have
    all its blocks before the GET ends), received in place where the backend can
    (``fastget.Landing``)."""

    def __init__(self, run: RunRead, stats: StoreStats) -> None:
        self._run = run
        self._stats = stats

    def __call__(self, view: memoryview) -> None:
        self._stats.backend_read_bytes += len(view)
        self._run.feed(view)

    def space(self) -> memoryview | None:
        return self._run.space()

    def landed(self, n: int) -> None:
        self._stats.backend_read_bytes += n
        self._run.landed(n)
