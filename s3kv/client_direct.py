"""Direct reads: blocks a gateway located in its sealed segments, read by the client itself from
the object store with the presigned ranged GETs the gateway answered (``locate``, native API).

A restore through the gateway costs the gateway's node a receive, a checksum and a send of every
byte. With ``s3kv serve --direct-reads`` the gateway answers where each block is instead, and
the client reads runs of neighbouring blocks with one ranged GET each (a run is the located
bytes over ``IN_FLIGHT``, within 32-256 MiB, unless one block is larger; ``IN_FLIGHT`` GETs at
once; s3kv.wire.fastget). Each block goes to the caller's sink as its first bytes arrive, as a
:class:`DirectBody`: the bytes after the ones it reads first (a header) are received straight
into the buffer it gives (``readinto``), and each block's CRC-32 is computed as they land and
compared with the one the gateway's index holds. A block counts as delivered only once it is
whole and its checksum matched; reading one that was not raises a ValueError.

What a direct read cannot deliver (the GET failed, expired, found the segment evicted, or a
block's checksum did not match) is returned to the caller to ask the gateway for, which answers
a miss for what is gone. A gateway without direct reads answers 501, and an object store the
client cannot reach fails its GETs: either way that gateway is not asked to locate again for
``OFF_FOR`` seconds.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from s3kv.client_io import BlockBody, Sink
from s3kv.errors import RequestError
from s3kv.store.layout import checksum_more
from s3kv.wire.fastget import GetPool, ProtocolError

#: bytes of neighbouring blocks read with one ranged GET: the located bytes over IN_FLIGHT,
#: within these bounds (a larger block is read alone). Fewer, larger GETs cost the object store
#: less per byte; at least IN_FLIGHT of them keep it busy on a restore inside one segment.
MIN_RUN_BYTES = 32 << 20
MAX_RUN_BYTES = 256 << 20
#: read through a gap of at most this many bytes between two blocks rather than split the run
MAX_GAP = 64 << 10
#: ranged GETs in flight at once per fetch
IN_FLIGHT = 8
#: seconds a gateway that answered 501 (direct reads off), or whose object store could not be
#: reached, is not asked to locate again
OFF_FOR = 300.0
#: a gateway's answers to ``locate`` that mean "read through me": direct reads off (501), or a
#: gateway from before them (no such route: 404, 405)
_NOT_OFFERED = frozenset({404, 405, 501})
#: the statuses whose body is the range asked for (a 200 only for a range from byte 0)
_PARTIAL = frozenset({206})
_FROM_ZERO = frozenset({200, 206})


@dataclass
class _Run:
    url: str
    start: int
    end: int
    members: list[tuple[int, int, int, int]]  # (position, offset, length, crc)


def plan_runs(doc: dict[str, Any], where: Sequence[int]) -> tuple[list[_Run], list[int],
                                                                  list[int]]:
    """A ``locate`` answer for the keys at positions ``where``: the ranged GETs to make, the
    positions to ask the gateway for, and the positions that are misses."""
    urls: list[str] = doc["urls"]
    located: list[tuple[int, int, int, int, int]] = []
    via: list[int] = []
    missing: list[int] = []
    for pos, entry in zip(where, doc["blocks"], strict=True):
        if entry is None:
            missing.append(pos)
        elif isinstance(entry, list):
            slot, offset, length, crc = (int(v) for v in entry)
            located.append((slot, offset, length, crc, pos))
        else:
            via.append(pos)
    total = sum(length for _, _, length, _, _ in located)
    cap = min(MAX_RUN_BYTES, max(MIN_RUN_BYTES, -(-total // IN_FLIGHT)))
    runs: list[_Run] = []
    for slot, offset, length, crc, pos in sorted(located):
        last = runs[-1] if runs else None
        end = offset + length
        if (last is not None and last.url == urls[slot] and 0 <= offset - last.end <= MAX_GAP
                and end - last.start <= cap):
            last.end = end
            last.members.append((pos, offset, length, crc))
        else:
            runs.append(_Run(urls[slot], offset, end, [(pos, offset, length, crc)]))
    return runs, via, missing


class _Undelivered(ValueError):
    """The block did not arrive whole and intact (the GET failed, or its CRC did not match)."""


class _Block:
    """One block of a run as its bytes arrive: received straight into the buffer its reader
    gives (``readinto``) once it has given one, held until it reads them before that (the
    first bytes: a header it reads to know the buffer it needs), dropped once it stops
    reading; its CRC-32 updated as the bytes land, in stream order, while they are in cache."""

    def __init__(self, length: int, crc: int) -> None:
        self.length = length
        self.expected_crc = crc
        self.arrived = 0
        self.crc = 0
        self.held = bytearray()
        self.held_from = 0  # bytes of ``held`` already read
        self.dest: memoryview | None = None  # the part of the reader's buffer still to fill
        self.dropping = False
        self.failed = "" if length or crc == 0 else "checksum mismatch"  # CRC-32 of b"": 0
        self._wake: asyncio.Future[None] | None = None

    @property
    def complete(self) -> bool:
        return self.arrived == self.length or bool(self.failed)

    # ---- the run's landing feeds it --------------------------------------------------------
    def space(self) -> memoryview | None:
        return self.dest if self.dest is not None and len(self.dest) and not self.dropping \
            else None

    def landed(self, n: int) -> None:
        """``n`` bytes were received into the start of ``space()``."""
        assert self.dest is not None
        self.crc = checksum_more(self.crc, self.dest[:n])
        self.dest = self.dest[n:]
        self._arrived(n)

    def take(self, data: memoryview) -> None:
        """Bytes received elsewhere: into the reader's buffer, else held (or dropped)."""
        self.crc = checksum_more(self.crc, data)
        n = len(data)
        if self.dest is not None and len(self.dest) and not self.dropping:
            k = min(len(self.dest), n)
            self.dest[:k] = data[:k]
            self.dest, data = self.dest[k:], data[k:]
        if len(data) and not self.dropping:
            self.held += data
        self._arrived(n)

    def _arrived(self, n: int) -> None:
        self.arrived += n
        if self.arrived == self.length and self.crc != self.expected_crc:
            self.failed = "checksum mismatch"
        self._notify()

    def fail(self, why: str) -> None:
        if not self.complete:
            self.failed = why
            self._notify()

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _wait(self) -> None:
        self._wake = asyncio.get_running_loop().create_future()
        await self._wake

    def _check(self) -> None:
        if self.failed:
            raise _Undelivered(self.failed)

    # ---- its reader (a ByteSource for DirectBody) ------------------------------------------
    async def started(self) -> None:
        """Once its first bytes are in (:class:`_Undelivered` if it failed first)."""
        while not self.arrived and not self.complete:
            await self._wait()
        if not self.arrived:
            self._check()

    async def read(self, n: int) -> bytes:
        while len(self.held) - self.held_from < min(n, 1) and not self.complete:
            await self._wait()
        self._check()
        piece = bytes(self.held[self.held_from:self.held_from + n])
        self.held_from += len(piece)
        return piece

    async def readexactly(self, n: int) -> bytes:
        while len(self.held) - self.held_from < n and not self.complete:
            await self._wait()
        if len(self.held) - self.held_from < n:
            self._check()
            raise asyncio.IncompleteReadError(b"", n)
        return await self.read(n)

    async def readinto(self, buf: memoryview) -> None:
        held = memoryview(self.held)[self.held_from:]
        k = min(len(held), len(buf))
        buf[:k] = held[:k]
        held.release()
        self.held_from += k
        if self.held_from == len(self.held):
            self.held, self.held_from = bytearray(), 0  # read: let it go
        if k < len(buf):
            self.dest = buf[k:]
            while self.dest is not None and len(self.dest) and not self.complete:
                await self._wait()
            self.dest = None
            self._check()

    async def drain(self) -> None:
        self.dropping = True
        self.held = bytearray()
        while not self.complete:
            await self._wait()
        self._check()


class DirectBody(BlockBody):
    """A located block's bytes as a direct read receives them (a BlockBody: read once, in
    order); ``readinto`` gives the memory the rest of them land in, with no copy.
    :class:`_Undelivered` (a ValueError) from any call: the block did not arrive intact."""

    def __init__(self, block: _Block) -> None:
        super().__init__(block, block.length)
        self._block = block

    async def readinto(self, buf: memoryview) -> None:
        if len(buf) > self.remaining:
            raise ValueError(f"buffer of {len(buf)} bytes, {self.remaining} left in the block")
        await self._block.readinto(buf)
        self.remaining -= len(buf)

    async def drain(self) -> None:
        await self._block.drain()
        self.remaining = 0


class _RunLanding:
    """A fastget Landing over a run: each byte of the ranged GET goes to the block it belongs
    to (straight into its reader's buffer where it has given one); gaps are dropped."""

    def __init__(self, run: _Run, blocks: list[_Block]) -> None:
        self._at = run.start  # the object offset of the next byte
        self._spans = [(off, off + n) for _, off, n, _ in run.members]
        self._blocks = blocks
        self._i = 0

    def _current(self) -> tuple[_Block | None, int]:
        """The block the next byte belongs to (None: a gap) and how many bytes it has left."""
        while self._i < len(self._spans) and self._at >= self._spans[self._i][1]:
            self._i += 1
        if self._i == len(self._spans):
            return None, 1 << 62
        start, end = self._spans[self._i]
        return (None, start - self._at) if self._at < start else \
            (self._blocks[self._i], end - self._at)

    def space(self) -> memoryview | None:
        block, left = self._current()
        space = None if block is None else block.space()
        return None if space is None else space[:left]

    def landed(self, n: int) -> None:
        block, _ = self._current()
        assert block is not None
        block.landed(n)
        self._at += n

    def __call__(self, data: memoryview) -> None:
        while len(data):
            block, left = self._current()
            k = min(left, len(data))
            if block is not None:
                block.take(data[:k])
            self._at += k
            data = data[k:]

    def fail(self, why: str) -> None:
        for block in self._blocks:
            block.fail(why)


class DirectReads:
    """The client's direct reads, per gateway (see the module docstring)."""

    def __init__(self, timeout: float, connect_timeout: float = 2.0) -> None:
        self._pool = GetPool(connect_timeout=connect_timeout)
        self._timeout = timeout
        self._off_until: dict[str, float] = {}

    def wanted(self, gateway: str) -> bool:
        """Whether to ask ``gateway`` where blocks are before reading them through it."""
        return time.monotonic() >= self._off_until.get(gateway, 0.0)

    def turn_off(self, gateway: str, seconds: float = OFF_FOR) -> None:
        self._off_until[gateway] = time.monotonic() + seconds

    async def fetch(self, gateway: str, part: list[int], locate: Callable[[], Awaitable[bytes]],
                    sink: Sink, done: list[bool]) -> list[int]:
        """The blocks at positions ``part`` read from the object store where ``gateway``
        located them (``locate``: its answer; misses go to ``sink`` as such); the positions
        left to read through it (batch get)."""
        try:
            doc = json.loads(await locate())
        except RequestError as exc:
            if exc.status not in _NOT_OFFERED:
                raise
            self.turn_off(gateway)  # direct reads are off there (or it predates them)
            return part
        try:
            runs, via, missing = plan_runs(doc, part)
        except (KeyError, TypeError, ValueError) as exc:
            raise RequestError("MalformedLocate", f"bad locate answer from {gateway}: "
                               f"{type(exc).__name__}: {exc}", 502) from exc
        for pos in missing:
            await sink(pos, None)
        return sorted(via + await self.read(gateway, runs, sink, done))

    async def read(self, gateway: str, runs: list[_Run], sink: Sink,
                   done: list[bool]) -> list[int]:
        """Read ``runs``, hand each block to ``sink`` as its bytes arrive and mark in ``done``
        the ones that arrived intact; the positions that did not (ask the gateway)."""
        failed: list[int] = []
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(run: _Run) -> None:
            blocks = [_Block(n, crc) for _, _, n, crc in run.members]
            async with gate:
                await _all([self._get(gateway, run, _RunLanding(run, blocks)),
                            _deliver(run, blocks, sink, done, failed)])

        await _all([one(run) for run in runs])
        return sorted(failed)

    async def _get(self, gateway: str, run: _Run, landing: _RunLanding) -> None:
        """The run's bytes to its blocks; whatever did not arrive fails (a backend out of
        reach also turns direct reads off for ``gateway`` for ``OFF_FOR`` seconds: unreachable
        is mostly a network policy, and each try would cost the engine a connect timeout)."""
        u = urlsplit(run.url)
        headers = {"Host": u.netloc, "Range": f"bytes={run.start}-{run.end - 1}"}
        why = "the object ended first"
        try:
            async with asyncio.timeout(self._timeout):
                resp = await self._pool.get(f"{u.scheme}://{u.netloc}", f"{u.path}?{u.query}",
                                            headers, landing,
                                            _FROM_ZERO if run.start == 0 else _PARTIAL)
            if resp.status not in _FROM_ZERO:
                why = f"HTTP {resp.status}"
        except (OSError, ProtocolError, TimeoutError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            self.turn_off(gateway)
        finally:
            landing.fail(why)  # the blocks not complete by now

    def close(self) -> None:
        self._pool.close()


async def _deliver(run: _Run, blocks: list[_Block], sink: Sink, done: list[bool],
                   failed: list[int]) -> None:
    """Give the run's blocks to ``sink`` in order, as their bytes start to arrive."""
    for (pos, _, _, _), block in zip(run.members, blocks, strict=True):
        body = DirectBody(block)
        try:
            await block.started()
            await sink(pos, body)
            await body.drain()
        except _Undelivered:
            failed.append(pos)
            continue
        done[pos] = True


async def _all(jobs: list[Awaitable[None]]) -> None:
    """Run ``jobs`` together; the first error cancels the others (awaited, so none is left
    running or unretrieved) and is raised."""
    tasks = [asyncio.ensure_future(j) for j in jobs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
