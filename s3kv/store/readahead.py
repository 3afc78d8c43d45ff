"""Read-ahead for one-block reads that walk a segment in order.

A prefix restored through the S3 front comes as one GET per block, in the order its blocks were
written (LMCache's S3 connector, a per-block GET loop, a recursive download): alone, each would
be one small ranged GET of a segment, and small ranges cost the S3 server more per byte than
large ones (Ceph RGW + OSD: 2.23 CPU-s per GiB of 2 MiB ranges against 1.79 for 32 MiB ranges,
``benchmarks/rgw_profile.py``). When ``STEPS`` one-block reads of a sealed segment in a row each
start where the furthest read of that segment ended moments before, the reads are walking it:
:class:`ReadAhead` then reads a window of the segment from there with one ranged GET, serves
the blocks that fall in it from its bytes (each as soon as its own bytes are in, not once the
whole window is), and starts the next window once the reads are ``NEXT_AT`` of the way into
the current one. Any other read starts nothing: random reads cost a
dictionary update.

Windows are held at most ``hold`` seconds after their last use and ``limit`` bytes in all; when
no window can be started, or one failed, a block is read on its own as before. Every block cut
from a window is checked against its CRC like any other (the caller's job).

A walk is one restore made of many requests, so its windows ask the read budget
(``readbudget.py``, oldest request first) with the age of the walk: the time of its first read.
Asked as new requests, they would wait behind every restore that began after the walk did.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from s3kv.store.index import Location
from s3kv.store.reader import MAX_GAP, ReadRun
from s3kv.store.runread import RunRead
from s3kv.store.stats import StoreStats
from s3kv.wire.body import Pieces

MiB = 1024 * 1024
#: bytes one window reads (one ranged GET)
WINDOW = 32 * MiB
#: segments whose last read end is remembered
TRACKED = 1024
#: reads in a row, each starting where the one before ended, that make a walk
STEPS = 2
#: a window is this far used (a share of its bytes) when the next one is started
NEXT_AT = 0.25
#: a window younger than this is never dropped to make room for another
MIN_AGE = 0.2


@dataclass(eq=False)
class Window:
    """Bytes [start, end) of one segment, read (or being read) as one run."""

    segment: int
    start: int
    end: int
    run: RunRead
    whole: Location  # the run's one member: all of the window's bytes
    used: float  # monotonic time of its last use
    born: float


class ReadAhead:
    def __init__(self, read: Callable[[RunRead], Awaitable[None]], stats: StoreStats,
                 limit: int, *, window: int = WINDOW, hold: float = 2.0) -> None:
        """``read``: streams a run's bytes into it and finishes it (the fetcher's
        ``_read_run``); ``limit``: bytes of windows held at once (0: no read-ahead)."""
        self._read = read
        self.stats = stats
        self.limit = limit
        self.window = window
        self.hold = hold
        #: blocks larger than this are read on their own (a window holds several)
        self.max_block = window // 4
        #: segment -> (when, end of the furthest recent read, reads in a row that walked, when
        #: the first of those reads came)
        self._ends: OrderedDict[int, tuple[float, int, int, float]] = OrderedDict()
        self._windows: list[Window] = []
        self.held_bytes = 0

    def windows_for(self, loc: Location, segment_length: int) -> list[Window]:
        """The window that holds (or will hold) the block at ``loc`` of a sealed segment of
        ``segment_length`` bytes, started here if the reads are walking the segment; two for
        a block that straddles the end of one (the next window starts where it ends); none:
        read the block on its own."""
        if self.limit <= 0:
            return []
        now = time.monotonic()
        self._expire(now)
        end = loc.offset + loc.length
        found = None
        for w in self._windows:
            if w.segment == loc.segment and w.start <= loc.offset < w.end:
                found = w
                break
        began = self._note(loc.segment, loc.offset, end, now)
        if found is None:
            if began is None or loc.length > self.max_block:
                return []
            found = self._start(loc.segment, loc.offset, segment_length, now, began)
            if found is None:
                return []
        found.used = now
        ahead = None
        if found.end < segment_length and (
                end > found.end or end - found.start > NEXT_AT * (found.end - found.start)):
            ahead = self._next(found, segment_length, now)  # started early, or found
        if end <= found.end:
            return [found]
        if ahead is None:
            return []
        ahead.used = now
        return [found, ahead]

    async def take(self, windows: list[Window], loc: Location) -> Pieces | None:
        """The block's raw (unverified) bytes from ``windows`` (as ``windows_for`` gave them);
        None: a window's read failed (it is dropped; read the block on its own)."""
        pieces: list[memoryview] = []
        start, end = loc.offset, loc.offset + loc.length
        for w in windows:
            upto = min(end, w.end)
            data = await w.run.upto(w.whole, upto)  # as soon as the block's bytes are in
            if data is None or len(data) < upto - w.start:
                self._drop(w)
                return None
            pieces.append(data[start - w.start:upto - w.start])
            start = w.end
        self.stats.readahead_blocks += 1
        return pieces[0] if len(pieces) == 1 else pieces

    def _next(self, window: Window, segment_length: int, now: float) -> Window | None:
        """The window that follows ``window`` (started now if there is none)."""
        for w in self._windows:
            if w.segment == window.segment and w.start == window.end:
                return w
        # the next window serves the same walk: its reads are as old as this one's
        return self._start(window.segment, window.end, segment_length, now, window.run.since)

    def _note(self, segment: int, start: int, end: int, now: float) -> float | None:
        """Remember how far the reads of ``segment`` went. If this read is the ``STEPS``-th
        (or later) in a row to start where the furthest recent one ended (or in the alignment
        gap after it), return when the row's first read came; else None. Any other read breaks
        the row and starts a new one."""
        when, furthest, steps, began = self._ends.get(segment, (0.0, -1, 0, now))
        recent = now - when <= self.hold
        if recent and furthest <= start <= furthest + MAX_GAP:
            steps += 1
        else:
            steps, began = 0, now
        self._ends[segment] = (now, max(end, furthest) if recent else end, steps, began)
        self._ends.move_to_end(segment)
        if len(self._ends) > TRACKED:
            self._ends.popitem(last=False)
        return began if steps >= STEPS else None

    def _start(self, segment: int, start: int, segment_length: int, now: float,
               since: float) -> Window | None:
        end = min(start + self.window, segment_length)
        size = end - start
        if size <= 0 or not self._room(size, now):
            return None
        whole = Location(segment, start, size, size, 0, 0, 0.0)
        run = RunRead(ReadRun(segment, start, end, [(0, whole)]), since)
        w = Window(segment, start, end, run, whole, now, now)
        run.task = asyncio.ensure_future(self._read(run))
        self._windows.append(w)
        self.held_bytes += size
        self.stats.readahead_windows += 1
        return w

    def _room(self, size: int, now: float) -> bool:
        """Whether ``size`` more bytes fit, dropping windows read to the end that the reads
        have passed, or that are not just started, least recently used first."""
        if size > self.limit:
            return False
        for w in sorted(self._windows, key=lambda w: w.used):
            if self.held_bytes + size <= self.limit:
                break
            passed = self._ends.get(w.segment, (0.0, 0, 0, 0.0))[1] > w.end
            if (passed or now - w.born >= MIN_AGE) and w.run.task is not None \
                    and w.run.task.done():
                self._drop(w)
        return self.held_bytes + size <= self.limit

    def close(self) -> list[asyncio.Task[None]]:
        """Let go of every window; the reads still running, for the caller to cancel."""
        running = [w.run.task for w in self._windows
                   if w.run.task is not None and not w.run.task.done()]
        self._windows.clear()
        self.held_bytes = 0
        return running

    def _expire(self, now: float) -> None:
        for w in [w for w in self._windows if now - w.used > self.hold]:
            self._drop(w)

    def _drop(self, window: Window) -> None:
        if window in self._windows:
            self._windows.remove(window)
            self.held_bytes -= window.end - window.start
            window.run.cancel()
