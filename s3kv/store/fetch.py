"""The store's read path: index -> open segment / DRAM tier / coalesced ranged GET -> checksum
-> codec, yielding blocks in request order as they arrive.

Blocks that need the backend are grouped into coalesced ranged reads (``plan_reads``, up to
``MAX_RUN`` bytes each). Each read hands its blocks out as they arrive (``runread.RunRead``),
and reads are started at most ``read_ahead`` bytes ahead of the block being handed out, so a
long prefix chain streams through bounded memory with few, large GETs. A backend that lends
ranges as views of memory it maps (``RangeViewer``: the file backend) lends each run whole, and
its blocks are views of that: no copy, no buffer. Blocks planned from a segment the writer held
but has sealed and let go by the time they are due are planned again then, as coalesced reads of
their own (not one GET per block).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from typing import cast

from s3kv.backends.base import Backend, NowViewer, RangeViewer, stream_range
from s3kv.errors import BackendError, IntegrityError, ObjectMissing
from s3kv.log import get_logger
from s3kv.store import layout
from s3kv.store.blocks import EMPTY, Block, as_block
from s3kv.store.blocksums import THREAD_THRESHOLD, checksum_async
from s3kv.store.codecs import NONE_ID, decode_any
from s3kv.store.dram import DramCache, frozen_copy
from s3kv.store.index import BlockIndex, Location
from s3kv.store.readahead import ReadAhead
from s3kv.store.readbudget import ReadBudget
from s3kv.store.reader import MAX_RUN, ReadRun, plan_reads
from s3kv.store.runread import RunRead, RunSink
from s3kv.store.segments import SegmentState, SegmentTable, segment_key
from s3kv.store.stats import StoreStats
from s3kv.store.unverified import Unverified
from s3kv.store.writer import SegmentWriter
from s3kv.wire.body import Pieces, joined, pieces_of, size_of

log = get_logger(__name__)

#: ranged GETs in flight at once, all requests together
READ_CONCURRENCY = 8
#: bytes of coalesced reads a single request starts ahead of the block it is handing out
#: (besides the read that holds it; with it, the whole budget): a restore streamed as one
#: request keeps as many reads in flight as several smaller requests would (readbudget.py)
READ_AHEAD = 3 * MAX_RUN
READ_BUDGET = 4 * MAX_RUN  # bytes of ranged GETs in flight at once, all requests together


class BlockFetcher:
    """Reads blocks for the store; knows the store's parts, not the store."""

    def __init__(self, backend: Backend, prefix: str, index: BlockIndex,
                 segments: SegmentTable, dram: DramCache, writer: SegmentWriter,
                 stats: StoreStats, forget_segment: Callable[[int], int],
                 lose: Callable[[int, bytes, Location], None], read_ahead: int = 0,
                 read_memory: int = 0) -> None:
        """``read_ahead``: the window read at once by one-block reads in order (readahead.py;
        0: off); ``read_memory``: bytes read held at once (readbudget.py; 0: those in flight)."""
        self.backend = backend
        #: what the backend can lend (asked once per backend object: isinstance is slow)
        self._kinds: tuple[Backend, RangeViewer | None, NowViewer | None] | None = None
        self.prefix = prefix
        self.index = index
        self.segments = segments
        self.dram = dram
        self.writer = writer
        self.stats = stats
        self._forget_segment = forget_segment
        self._lose = lose  # a corrupt block: forgotten, and remembered for eviction
        self._budget = ReadBudget(READ_BUDGET, READ_CONCURRENCY, read_memory)
        #: up to four windows held: a walk uses two at a time (the one being served, the next)
        self.readahead = ReadAhead(self._read_run, stats, 4 * read_ahead, window=max(read_ahead, 1))

    @property
    def reading(self) -> bool:
        """Whether backend reads are in flight or waiting (the writer paces uploads by it)."""
        return self._budget.busy

    @property
    def read_memory(self) -> int:
        """Bytes read from the backend (or decoded) held now: in flight, or not let go of."""
        return self._budget.held

    def iter_many(self, nid: int, keys: Sequence[bytes], *, decode: bool = True,
                  read_ahead: int = READ_AHEAD) -> AsyncGenerator[Pieces | None, None]:
        """One item per key, in order: the block's bytes (one buffer, or the pieces a DRAM-tier
        hit was written in), or None on a miss (absent, evicted, corrupt, backend down). Close
        the iterator (``contextlib.aclosing``) when stopping early: its reads are cancelled."""
        return cast(AsyncGenerator[Pieces | None, None],
                    self._blocks(nid, keys, decode, read_ahead, False))

    async def get_many(self, nid: int, keys: Sequence[bytes], *,
                       decode: bool = True) -> list[Block | None]:
        """:meth:`iter_many` as a list; several blocks are copied as they come, so the later
        reads do not wait for the memory (readbudget.py) the list would hold."""
        async with aclosing(self.iter_many(nid, keys, decode=decode)) as blocks:
            return [None if b is None else as_block(b, len(keys) > 1) async for b in blocks]

    def iter_unverified(self, nid: int, keys: Sequence[bytes]
                        ) -> AsyncGenerator[Pieces | Unverified | None, None]:
        """:meth:`iter_many`, but a block the backend lends (a view of a mapped segment),
        stored as it is, small enough to check on the loop and with no DRAM tier to fill,
        comes unchecked, as :class:`Unverified` (its reader checks it as it sends it)."""
        return self._blocks(nid, keys, True, READ_AHEAD, True)

    async def _blocks(self, nid: int, keys: Sequence[bytes], decode: bool, read_ahead: int,
                      unverified: bool, at: Sequence[Location | None] | None = None
                      ) -> AsyncGenerator[Pieces | Unverified | None, None]:
        """:meth:`iter_many`'s walk (``unverified``: as :meth:`iter_unverified`'s; ``at``: the
        blocks' locations as the caller found them, not looked up again)."""
        defer = unverified and not self.dram.enabled
        locs: list[Location | None] = []
        cached: dict[int, Pieces] = {}  # DRAM tier hits (verified when they were stored)
        in_memory: set[int] = set()  # in a segment the writer still holds: copied when due
        lent: dict[int, memoryview] = {}  # lent at once by the backend (``_start``)
        wanted: list[tuple[int, Location]] = []
        for pos, key in enumerate(keys):
            self.stats.gets += 1
            loc = self.index.get(nid, key) if at is None else at[pos]
            locs.append(loc)
            if loc is None:
                continue
            hit = self.dram.get(nid, key, loc) if self.dram.enabled and decode else None
            if hit is not None:
                self.stats.dram_hits += 1
                cached[pos] = hit
                continue
            if self.dram.enabled:
                self.stats.dram_misses += 1
            if not loc.length:  # empty: nothing to read (an S3 directory marker)
                lent[pos] = EMPTY
            elif self.writer.holds(loc.segment):
                in_memory.add(pos)
            else:
                wanted.append((pos, loc))
        since = time.monotonic()  # the reads of one request share its age (readbudget.py)
        plans = sorted(plan_reads(wanted), key=lambda p: min(q for q, _ in p.members))
        run_of = {pos: i for i, plan in enumerate(plans) for pos, _ in plan.members}
        ends = list(itertools.accumulate(p.end - p.start for p in plans))  # plan i ends there
        runs: dict[int, RunRead] = {}  # plan index -> its read, once started (unless lent)
        started = 0
        late_runs: list[RunRead] = []
        late_of: dict[int, RunRead] = {}
        try:
            for pos, key in enumerate(keys):
                loc = locs[pos]
                raw: Pieces | None = None
                block: Pieces | None = None
                view: memoryview | None = None  # lent by the backend
                if loc is None:
                    pass
                elif pos in cached:
                    block = cached.pop(pos)
                elif pos in lent:
                    raw = view = lent.pop(pos)
                elif pos in in_memory:
                    raw = self.writer.read(loc.segment, loc.offset, loc.length)
                    if raw is None:  # sealed and let go since the plan
                        for run in self._replan(loc.segment, pos, locs, in_memory, since):
                            late_runs.append(run)
                            late_of.update((p, run) for p, _ in run.plan.members)
                        raw = await late_of[pos].block(loc)
                elif pos in late_of:
                    raw = await late_of[pos].block(loc)
                else:
                    i = run_of[pos]
                    while started < len(plans) and (
                            started <= i or ends[started] - ends[i] <= read_ahead):
                        reading = self._start(plans[started], since, lent)
                        if reading is not None:
                            runs[started] = reading
                        started += 1
                    raw = view = lent.pop(pos, None)
                    if raw is None:
                        raw = await runs[i].block(loc)
                        view = raw if runs[i].lent else None
                if defer and view is not None and loc is not None and loc.codec == NONE_ID \
                        and len(view) == loc.length <= THREAD_THRESHOLD:
                    self._count(nid, key, True)  # until rejected
                    yield Unverified(view, loc.crc, functools.partial(self._reject, nid, key, loc))
                    continue
                if loc is not None and raw is not None and block is None:
                    block = await self._verified(nid, key, loc, raw, decode)
                self._count(nid, key, block is not None)
                yield block
        finally:
            for run in [*runs.values(), *late_runs]:
                run.cancel()

    def _start(self, plan: ReadRun, since: float, lent: dict[int, memoryview]
               ) -> RunRead | None:
        """Start reading ``plan``: lent at once by the backend (mapped, in memory), its
        members' views put in ``lent``, with no task and no worker thread (None); else read by
        a task (the run)."""
        size = plan.end - plan.start
        view = self._view_now(plan.segment, plan.start, size)
        if view is not None and len(view) == size:  # short: read, the rest are misses
            lent.update((pos, view[loc.offset - plan.start:][:loc.length])
                        for pos, loc in plan.members)
            return None
        run = RunRead(plan, since)
        run.task = asyncio.create_task(self._read_run(run))
        return run

    def _replan(self, segment: int, pos: int, locs: Sequence[Location | None],
                in_memory: set[int], since: float) -> list[RunRead]:
        """The blocks from ``pos`` on that were planned in the writer's memory, in a segment it
        has let go since: taken out of ``in_memory`` and read now as coalesced runs."""
        late = [(p, loc) for p in sorted(in_memory) if p >= pos
                and (loc := locs[p]) is not None and loc.segment == segment]
        in_memory.difference_update(p for p, _ in late)
        runs = [RunRead(plan, since) for plan in plan_reads(late)]
        for run in runs:
            run.task = asyncio.create_task(self._read_run(run))
        return runs

    def read_now(self, nid: int, key: bytes) -> Pieces | None:
        """:meth:`read_one`'s block when nothing in reading it needs a wait: stored as it is,
        verified on the loop (at most THREAD_THRESHOLD bytes), and at hand in the DRAM tier
        (when it is on), in a segment the writer holds or in a sealed segment the backend
        lends at once. None: ask :meth:`read_one` (for a miss, a block it must wait for, or
        one that fails its checksum here, which it reads, counts and drops)."""
        loc = self.index.get(nid, key)
        if loc is None or loc.codec != NONE_ID or loc.length > THREAD_THRESHOLD:
            return None
        if self.dram.enabled:  # a miss there is read_one's (it fills the tier)
            data = self.dram.get(nid, key, loc)
            if data is not None:
                self.stats.dram_hits += 1
        else:
            data = self._at_hand(loc)
            if data is None or size_of(data) != loc.length \
                    or layout.checksum_pieces(pieces_of(data)) != loc.crc:
                return None
        if data is not None:
            self.stats.gets += 1
            self._count(nid, key, True)
        return data

    async def read_one(self, nid: int, key: bytes, loc: Location | None) -> Pieces | None:
        """The block at ``loc`` (where the caller found the key: that version's bytes even if
        the key is written again meanwhile), as ``iter_many`` gives it, without its machinery
        (an async generator, a task per read, a worker thread) when it is at hand: in the DRAM
        tier, in a segment the writer holds, in a sealed segment the backend lends at once, or
        in a read-ahead window of a segment the reads walk. Else the general path."""
        if loc is not None:
            hit = self.dram.get(nid, key, loc) if self.dram.enabled else None
            if hit is not None:
                self.stats.gets += 1
                self.stats.dram_hits += 1
                self._count(nid, key, True)
                return hit
            raw = self._at_hand(loc)
            if raw is None:
                raw = await self._ahead(loc)
            if raw is not None:
                self.stats.gets += 1
                if self.dram.enabled:
                    self.stats.dram_misses += 1
                block = await self._verified(nid, key, loc, raw)
                self._count(nid, key, block is not None)
                return block
        async with aclosing(self._blocks(nid, [key], True, READ_AHEAD, False, [loc])) as walk:
            async for got in walk:
                return cast(Pieces | None, got)  # no Unverified: not asked for
        return None

    async def _ahead(self, loc: Location) -> Pieces | None:
        """The block from a read-ahead window when the reads walk its sealed segment; None:
        not so (or the window failed). Not for a backend that maps segments (the kernel reads
        a mapped file ahead itself)."""
        info = self.segments.get(loc.segment)
        if (info is None or info.state is not SegmentState.SEALED
                or self._viewers()[0] is not None):
            return None
        windows = self.readahead.windows_for(loc, info.length)
        return await self.readahead.take(windows, loc) if windows else None

    def _viewers(self) -> tuple[RangeViewer | None, NowViewer | None]:
        if self._kinds is None or self._kinds[0] is not self.backend:
            b = self.backend
            self._kinds = (b, b if isinstance(b, RangeViewer) else None,
                           b if isinstance(b, NowViewer) else None)
        return self._kinds[1], self._kinds[2]

    def _at_hand(self, loc: Location) -> Pieces | None:
        """The block's stored bytes if no wait is needed: in a segment the writer holds, lent
        at once by the backend, or none at all (an empty block: nothing to read); else None."""
        if not loc.length:
            return EMPTY
        raw = self.writer.read(loc.segment, loc.offset, loc.length)
        return raw if raw is not None else self._view_now(loc.segment, loc.offset, loc.length)

    def _view_now(self, segment: int, start: int, length: int) -> memoryview | None:
        """The segment's bytes [start, start + length) lent at once by the backend, if it can
        (in memory, and small enough for the loop: the backend's call; shorter at the end of
        its file); else None."""
        info = self.segments.get(segment)
        now = self._viewers()[1]
        if now is None or info is None or info.state is not SegmentState.SEALED:
            return None
        view = now.view_now(segment_key(self.prefix, info.name), start, length)
        if view is not None:
            self.stats.backend_reads += 1
            self.stats.backend_read_bytes += len(view)
            info.last_access = time.time()
        return view

    def _count(self, nid: int, key: bytes, hit: bool) -> None:
        if hit:
            self.stats.hits += 1
            self.index.touch(nid, key)
        else:
            self.stats.misses += 1

    async def _read_run(self, run: RunRead) -> None:
        """Stream the run's bytes into its blocks; on any failure the blocks not complete are
        misses (logged and counted here)."""
        plan = run.plan
        info = self.segments.get(plan.segment)
        try:
            if info is None or info.state is SegmentState.EVICTING:
                return
            key = segment_key(self.prefix, info.name)
            backend, stats = self.backend, self.stats
            sink = RunSink(run, stats)
            viewer = self._viewers()[0]

            async def attempt() -> int:
                run.restart()
                stats.backend_reads += 1
                info.last_access = time.time()
                if viewer is not None:
                    view = await viewer.view_range(key, plan.start, run.size)
                    stats.backend_read_bytes += len(view)
                    run.lend(view)
                    return len(view)
                return await stream_range(backend, key, plan.start, run.size, sink)

            try:
                async with self._budget.hold(run.size, run.since) as held:
                    run.held = held
                    await self.writer.retry.run(attempt)
            except ObjectMissing:
                log.warning("segment.missing", segment=info.name)
                self._forget_segment(plan.segment)
                return
            except BackendError as exc:
                self.stats.backend_errors += 1
                log.warning("store.read_failed", segment=info.name, error=str(exc))
        finally:
            run.finish()

    async def _verified(self, nid: int, key: bytes, loc: Location, data: Pieces,
                        decode: bool = True) -> Pieces | None:
        """Checksum, then decode: any mismatch is a miss (logged, counted), never data."""
        problem = ""
        if size_of(data) != loc.length or await checksum_async(data) != loc.crc:
            problem = "checksum mismatch"
        elif decode and loc.codec != NONE_ID:
            try:
                data = await asyncio.to_thread(decode_any, loc.codec, memoryview(joined(data)),
                                             loc.raw_length)
            except IntegrityError as exc:
                problem = f"undecodable: {exc}"
            else:
                if len(data) != loc.raw_length:
                    problem = "decoded length mismatch"
                elif not self.dram.enabled:  # the tier keeps a copy in its own bound (below)
                    data = self._budget.charged(data)
        if problem:
            self._corrupt(nid, key, loc, problem)
            return None
        if self.dram.enabled and decode:
            # the tier keeps immutable pieces, or a copy of its own (not a view of a whole GET)
            data = frozen_copy(data)
            self.dram.put(nid, key, loc, data)
        return data

    def _reject(self, nid: int, key: bytes, loc: Location) -> None:
        """An :class:`Unverified` block failed its reader's check: a miss, not the hit it was
        counted as."""
        self.stats.hits -= 1
        self.stats.misses += 1
        self._corrupt(nid, key, loc, "checksum mismatch")

    def _corrupt(self, nid: int, key: bytes, loc: Location, problem: str) -> None:
        """A block read back is not what was stored: counted, logged, and forgotten."""
        self.stats.checksum_failures += 1
        log.error("block.corrupt", key=key[:80], segment=loc.segment, offset=loc.offset,
                  problem=problem)
        if self.index.get(nid, key) == loc:
            self._lose(nid, key, loc)
