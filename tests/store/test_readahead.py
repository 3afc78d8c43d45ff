"""Read-ahead for one-block reads walking a segment (s3kv/store/readahead.py): a walk is seen
after two reads in a row that start where the one before ended, one window then serves the
blocks that follow (each exactly its bytes), the next window starts before the reads reach it,
random reads start nothing, memory stays within the limit, and a failed window hands the block
back to be read on its own. The backend is a function that feeds a run from a bytes object."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time

from s3kv.store.index import Location
from s3kv.store.readahead import ReadAhead
from s3kv.store.runread import RunRead
from s3kv.store.stats import StoreStats
from s3kv.wire.body import joined

KiB = 1024
BLOCK = 64 * KiB
GAP = 4 * KiB  # alignment padding between blocks, as a segment has
WINDOW = 1024 * KiB


def _segment(n: int) -> tuple[bytes, list[Location]]:
    seg = bytearray()
    locs = []
    for _ in range(n):
        locs.append(Location(7, len(seg), BLOCK, BLOCK, 0, 0, 0.0))
        seg += os.urandom(BLOCK) + b"\0" * GAP
    return bytes(seg), locs


class Backend:
    def __init__(self, data: bytes, fail: bool = False) -> None:
        self.data = data
        self.fail = fail
        self.reads: list[tuple[int, int]] = []
        self.ages: list[float] = []  # each window's ``since`` (its age in the read budget)

    async def read(self, run: RunRead) -> None:
        self.reads.append((run.plan.start, run.plan.end))
        self.ages.append(run.since)
        await asyncio.sleep(0)
        if not self.fail:
            run.feed(memoryview(self.data)[run.plan.start:run.plan.end])
        run.finish()


def _ahead(backend: Backend, limit: int = 4 * WINDOW) -> tuple[ReadAhead, StoreStats]:
    stats = StoreStats()
    return ReadAhead(backend.read, stats, limit, window=WINDOW), stats


async def _read(ra: ReadAhead, backend: Backend, loc: Location) -> bytes | None:
    """What the fetcher does: a window's bytes, else a read of the block alone."""
    windows = ra.windows_for(loc, len(backend.data))
    if windows:
        got = await ra.take(windows, loc)
        if got is not None:
            return joined(got)
    return None


async def test_a_walk_is_served_from_few_large_reads() -> None:
    data, locs = _segment(64)  # 4.25 MiB: five windows of 1 MiB
    backend = Backend(data)
    ra, stats = _ahead(backend)
    alone = 0
    for loc in locs:
        got = await _read(ra, backend, loc)
        if got is None:
            alone += 1
        else:
            assert got == data[loc.offset:loc.offset + loc.length]
    assert alone == 2  # the first two reads make the walk; the third starts a window
    assert stats.readahead_blocks == 62
    assert len(backend.reads) == stats.readahead_windows <= 6
    # windows follow each other without a gap or an overlap, from the third block on
    starts = sorted(backend.reads)
    assert starts[0][0] == locs[2].offset
    assert all(a[1] == b[0] for a, b in itertools.pairwise(starts))
    assert ra.held_bytes <= 4 * WINDOW


async def test_concurrent_readers_in_order_share_the_windows() -> None:
    data, locs = _segment(48)
    backend = Backend(data)
    ra, _stats = _ahead(backend)
    queue = list(range(len(locs)))
    got: dict[int, bytes | None] = {}

    async def worker() -> None:
        while queue:
            i = queue.pop(0)
            got[i] = await _read(ra, backend, locs[i])

    await asyncio.gather(*(worker() for _ in range(8)))
    served = [i for i, g in got.items() if g is not None]
    assert len(served) >= 40
    for i in served:
        assert got[i] == data[locs[i].offset:locs[i].offset + BLOCK]


async def test_windows_ask_the_budget_as_old_as_their_walk() -> None:
    """A walk is one restore made of many GETs: its windows wait in the read budget by the time
    of the walk's first read, not as requests as new as the GET that started them."""
    data, locs = _segment(64)
    backend = Backend(data)
    ra = ReadAhead(backend.read, StoreStats(), 4 * WINDOW, window=WINDOW, hold=0.2)
    first = time.monotonic()
    for loc in locs[:3]:  # the third read starts the first window
        await _read(ra, backend, loc)
        await asyncio.sleep(0.03)
    for loc in locs[3:]:
        await _read(ra, backend, loc)
    assert len(backend.ages) >= 3
    assert all(first <= age < first + 0.03 for age in backend.ages)
    # once the row has lapsed, a walk over the same blocks is a new one, with a new age
    await asyncio.sleep(0.3)
    again = time.monotonic()
    for loc in locs[:3]:
        await _read(ra, backend, loc)
    assert len(backend.ages) > 3 and backend.ages[-1] >= again


async def test_a_block_goes_out_before_the_rest_of_its_window_arrives() -> None:
    data, locs = _segment(32)
    half = asyncio.Event()
    windows: list[RunRead] = []

    async def slow(run: RunRead) -> None:  # the first half of each window, then a stall
        windows.append(run)
        view = memoryview(data)[run.plan.start:run.plan.end]
        run.feed(view[:len(view) // 2])
        await half.wait()
        run.feed(view[len(view) // 2:])
        run.finish()

    ra = ReadAhead(slow, StoreStats(), 4 * WINDOW, window=WINDOW)
    for loc in locs[:2]:
        assert ra.windows_for(loc, len(data)) == []  # the walk is not seen yet
    first = ra.windows_for(locs[2], len(data))  # starts the window at block 2
    got = await asyncio.wait_for(ra.take(first, locs[2]), 5)
    assert not half.is_set() and got is not None
    assert joined(got) == data[locs[2].offset:locs[2].offset + BLOCK]
    half.set()
    assert len(windows) == 1


async def test_random_reads_start_nothing() -> None:
    data, locs = _segment(256)
    backend = Backend(data)
    ra, stats = _ahead(backend)
    order = list(range(len(locs)))
    random.Random(3).shuffle(order)
    for i in order:
        assert await _read(ra, backend, locs[i]) is None
    # two steps in a row in a shuffle of 256 are rare; a window or two at most
    assert stats.readahead_windows <= 2


async def test_memory_stays_within_the_limit() -> None:
    data, locs = _segment(64)
    backend = Backend(data)
    ra, stats = _ahead(backend, limit=WINDOW)  # room for one window, not the next
    for loc in locs:
        await _read(ra, backend, loc)
        assert ra.held_bytes <= WINDOW
    assert stats.readahead_windows >= 1


async def test_a_failed_window_sends_the_block_to_be_read_alone() -> None:
    data, locs = _segment(8)
    backend = Backend(data, fail=True)
    ra, stats = _ahead(backend)
    results = [await _read(ra, backend, loc) for loc in locs[:4]]
    assert results == [None, None, None, None]
    assert stats.readahead_blocks == 0
    assert ra.held_bytes == 0  # the failed windows were dropped


async def test_blocks_too_large_for_a_window_are_read_alone() -> None:
    big = Location(7, 0, WINDOW, WINDOW, 0, 0, 0.0)
    locs = [Location(7, i * WINDOW, WINDOW, WINDOW, 0, 0, 0.0) for i in range(4)]
    backend = Backend(b"\0" * 4 * WINDOW)
    ra, stats = _ahead(backend)
    for loc in [big, *locs[1:]]:
        assert ra.windows_for(loc, 4 * WINDOW) == []
    assert stats.readahead_windows == 0


async def test_off_when_the_limit_is_zero() -> None:
    data, locs = _segment(8)
    backend = Backend(data)
    ra, _stats = _ahead(backend, limit=0)
    for loc in locs:
        assert ra.windows_for(loc, len(data)) == []
    assert backend.reads == []


async def test_close_lets_go_of_every_window_and_hands_back_running_reads() -> None:
    data, locs = _segment(8)
    started = asyncio.Event()

    async def stuck(run: RunRead) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            run.finish()

    ra = ReadAhead(stuck, StoreStats(), 4 * WINDOW, window=WINDOW)
    for loc in locs[:3]:
        windows = ra.windows_for(loc, len(data))
    assert windows and ra.held_bytes > 0
    await started.wait()
    running = ra.close()
    assert len(running) == 1 and ra.held_bytes == 0
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    assert await ra.take(windows, locs[2]) is None  # the reader waiting on it is told: a miss
