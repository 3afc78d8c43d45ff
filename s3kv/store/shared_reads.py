"""Ranged reads of one block share one read of the whole block.

A block's checksum covers all of it, so serving any range of a block means reading and
verifying the whole block. S3 clients download a large object as parallel ranged GETs (awscrt,
LMCache's S3 connector, ``aws s3 cp`` above its multipart threshold: 8 MiB ranges): a 32 MiB
block fetched that way was read from the backend four times. :class:`SharedReads` gives the
reads of one block that overlap in time one backend read, and keeps a block that was read for
a range for ``hold`` seconds, at most ``limit`` bytes in all, so that the ranges that come just
after it are cut from memory too. A block is let go as soon as as many bytes of it have been
asked for as it has (every range of a download served once), which leaves the room to the
blocks whose ranges are still coming when a client downloads many objects at once; when the
limit is reached, newly read blocks are not held (their ranges read them again) rather than
held blocks dropped.

A block is known by its :class:`~s3kv.store.index.Location` as well as its key: a block written
again, or deleted and written again, is another block and is read afresh.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from s3kv.store.index import Location
from s3kv.wire.body import Pieces, size_of

Ident = tuple[int, bytes, Location]


class SharedReads:
    def __init__(self, limit: int, hold: float = 2.0) -> None:
        self.limit = limit
        self.hold = hold
        self.shared = 0  # reads answered by another read's bytes (in flight or held)
        self._flying: dict[Ident, asyncio.Future[Pieces | None]] = {}
        self._held: OrderedDict[Ident, tuple[float, Pieces]] = OrderedDict()
        self._held_bytes = 0
        self._asked: dict[Ident, int] = {}  # bytes asked for, per block in flight or held

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def __contains__(self, ident: Ident) -> bool:
        """Whether the block is held now."""
        return ident in self._held

    async def read(self, ident: Ident, span: int,
                   load: Callable[[], Awaitable[Pieces | None]]) -> Pieces | None:
        """The block's bytes: held, or from a read of it in flight, or from ``load()``
        (which then serves the reads that come while it runs, and is held if it fits and
        ranges of it are still to come). ``span``: how many bytes of it the caller sends."""
        self._expire()
        self._asked[ident] = self._asked.get(ident, 0) + span
        held = self._held.get(ident)
        if held is not None:
            self.shared += 1
            if self._asked[ident] >= size_of(held[1]):  # its last range: let it go
                self._drop(ident)
            return held[1]
        flying = self._flying.get(ident)
        if flying is not None:
            self.shared += 1
            return await asyncio.shield(flying)
        # its own task: a caller that goes away (cancelled) does not fail the others
        task = asyncio.ensure_future(load())
        self._flying[ident] = task
        task.add_done_callback(lambda done: self._landed(ident, done))
        return await asyncio.shield(task)

    def _landed(self, ident: Ident, done: asyncio.Future[Pieces | None]) -> None:
        self._flying.pop(ident, None)
        asked = self._asked.pop(ident, 0)
        if done.cancelled() or done.exception() is not None:
            return
        data = done.result()
        size = 0 if data is None else size_of(data)
        # a full store of held blocks takes no more: the blocks it holds have ranges still to
        # come (dropping one for a newcomer would only move the second read to it)
        if data is None or asked >= size or self._held_bytes + size > self.limit:
            return
        self._held[ident] = (time.monotonic() + self.hold, data)
        self._held_bytes += size
        self._asked[ident] = asked
        asyncio.get_running_loop().call_later(self.hold, self._expire)  # let go when idle

    def _expire(self) -> None:
        now = time.monotonic()
        while self._held and next(iter(self._held.values()))[0] <= now:
            self._drop(next(iter(self._held)))

    def _drop(self, ident: Ident) -> None:
        _, data = self._held.pop(ident)
        self._asked.pop(ident, None)
        self._held_bytes -= size_of(data)
