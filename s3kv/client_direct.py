"""Direct reads: blocks a gateway located in its sealed segments, read by the client itself from
the object store with the presigned ranged GETs the gateway answered (``locate``, native API).

A restore through the gateway costs the gateway's node a receive, a checksum and a send of every
byte. With ``s3kv serve --direct-reads`` the gateway answers where each block is instead, and
the client reads runs of neighbouring blocks with one ranged GET each (a run is the located
bytes over ``IN_FLIGHT``, within 32-256 MiB, unless one block is larger; ``IN_FLIGHT`` GETs at
once; s3kv.wire.fastget). Each block goes to the caller's sink as its first bytes arrive, as a
LandedBody (client_landing.py): the bytes after the ones it reads first (a header) are
received straight into the buffer it gives (``readinto``), and each block's CRC-32 is computed
as they land and compared with the one the gateway's index holds. A block counts as delivered
only once it is whole and its checksum matched; reading one that was not raises a ValueError.

What a direct read cannot deliver (the GET failed, expired, found the segment evicted, or a
block's checksum did not match) is returned to the caller to ask the gateway for, which answers
a miss for what is gone. A gateway without direct reads answers 501, and an object store the
client cannot reach fails its GETs: either way that gateway is not asked to locate again for
``OFF_FOR`` seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from s3kv.client_io import Sink, answer_doc, together
from s3kv.client_landing import BlockIn, LandedBody, Undelivered
from s3kv.errors import RequestError
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


class _RunLanding:
    """A fastget Landing over a run: each byte of the ranged GET goes to the block it belongs
    to (straight into its reader's buffer where it has given one); gaps are dropped."""

    def __init__(self, run: _Run, blocks: list[BlockIn]) -> None:
        self._at = run.start  # the object offset of the next byte
        self._spans = [(off, off + n) for _, off, n, _ in run.members]
        self._blocks = blocks
        self._i = 0

    def _current(self) -> tuple[BlockIn | None, int]:
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
            doc = answer_doc(gateway, await locate())
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
            blocks = [BlockIn(n, crc) for _, _, n, crc in run.members]
            async with gate:
                await together([self._get(gateway, run, _RunLanding(run, blocks)),
                            _deliver(run, blocks, sink, done, failed)])

        await together([one(run) for run in runs])
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


async def _deliver(run: _Run, blocks: list[BlockIn], sink: Sink, done: list[bool],
                   failed: list[int]) -> None:
    """Give the run's blocks to ``sink`` in order, as their bytes start to arrive."""
    for (pos, _, _, _), block in zip(run.members, blocks, strict=True):
        body = LandedBody(block)
        try:
            await block.started()
            await sink(pos, body)
            await body.drain()
        except Undelivered:
            failed.append(pos)
            continue
        done[pos] = True
