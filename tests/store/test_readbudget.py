"""The bound on backend reads in flight, oldest request first (s3kv/store/readbudget.py)."""

from __future__ import annotations

import asyncio

import pytest

from s3kv.store.readbudget import ReadBudget
from s3kv.store.runread import block_buffer


async def _holder(budget: ReadBudget, n: int, release: asyncio.Event, log: list[int],
                  since: float | None = None) -> None:
    async with budget.hold(n, since):
        log.append(n)
        await release.wait()


async def test_reads_over_the_budget_wait_their_turn_in_order() -> None:
    budget = ReadBudget(100, 8)
    gates = [asyncio.Event() for _ in range(4)]
    log: list[int] = []
    tasks = [asyncio.create_task(_holder(budget, n, g, log))
             for n, g in zip([60, 50, 30, 10], gates, strict=True)]
    await asyncio.sleep(0.01)
    # 60 runs; 50 does not fit, and 30 and 10 queue behind it (first come, first served)
    assert log == [60] and budget.used == 60
    gates[0].set()
    await asyncio.sleep(0.01)
    assert log == [60, 50, 30, 10] and budget.used == 90
    for g in gates:
        g.set()
    await asyncio.gather(*tasks)
    assert budget.used == 0


async def test_a_read_larger_than_the_budget_takes_all_of_it() -> None:
    budget = ReadBudget(100, 8)
    release = asyncio.Event()
    log: list[int] = []
    big = asyncio.create_task(_holder(budget, 1000, release, log))
    await asyncio.sleep(0.01)
    assert budget.used == 100
    small = asyncio.create_task(_holder(budget, 1, asyncio.Event(), log))
    await asyncio.sleep(0.01)
    assert log == [1000]
    release.set()
    await big
    await asyncio.sleep(0.01)
    assert log == [1000, 1]
    small.cancel()
    with pytest.raises(asyncio.CancelledError):
        await small
    assert budget.used == 0


async def test_a_cancelled_waiter_lets_the_ones_behind_it_go() -> None:
    budget = ReadBudget(100, 8)
    release = asyncio.Event()
    log: list[int] = []
    first = asyncio.create_task(_holder(budget, 70, release, log))
    await asyncio.sleep(0.01)
    blocked = asyncio.create_task(_holder(budget, 80, asyncio.Event(), log))
    await asyncio.sleep(0.01)
    behind = asyncio.create_task(_holder(budget, 20, release, log))
    await asyncio.sleep(0.01)
    assert log == [70]  # 20 would fit, but waits behind 80
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    await asyncio.sleep(0.01)
    assert log == [70, 20] and budget.used == 90
    release.set()
    await asyncio.gather(first, behind)
    assert budget.used == 0


async def test_waiting_reads_go_in_by_the_age_of_their_request() -> None:
    budget = ReadBudget(100, 8)
    release = asyncio.Event()
    log: list[int] = []
    first = asyncio.create_task(_holder(budget, 100, release, log, since=0.0))
    await asyncio.sleep(0.01)
    # asked in this order, by requests that began at 30, 10 and 20
    waiting = [asyncio.create_task(_holder(budget, n, release, log, since=float(n)))
               for n in (30, 10, 20)]
    await asyncio.sleep(0.01)
    assert log == [100]
    release.set()
    await asyncio.gather(first, *waiting)
    assert log == [100, 10, 20, 30] and budget.used == 0 and not budget.busy


async def test_no_more_than_most_reads_at_once_however_small() -> None:
    budget = ReadBudget(100, 2)
    release = asyncio.Event()
    log: list[int] = []
    tasks = [asyncio.create_task(_holder(budget, 1, release, log)) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert log == [1, 1] and budget.reads == 2 and budget.busy
    release.set()
    await asyncio.gather(*tasks)
    assert len(log) == 5 and budget.reads == 0 and not budget.busy


async def test_a_younger_read_that_fits_does_not_pass_the_head() -> None:
    budget = ReadBudget(100, 8)
    release = asyncio.Event()
    log: list[int] = []
    first = asyncio.create_task(_holder(budget, 60, release, log, since=0.0))
    await asyncio.sleep(0.01)
    old_big = asyncio.create_task(_holder(budget, 50, release, log, since=1.0))
    young_small = asyncio.create_task(_holder(budget, 10, release, log, since=2.0))
    await asyncio.sleep(0.01)
    assert log == [60]  # 10 would fit, but an older read waits first
    release.set()
    await asyncio.gather(first, old_big, young_small)
    assert log == [60, 50, 10]


async def test_a_read_s_bytes_stay_held_while_its_buffers_live() -> None:
    """A block read for a client that has not taken it yet keeps its room: later reads wait
    until its buffer is freed; what no buffer took goes back when the read ends."""
    budget = ReadBudget(100, 8, held_limit=100)
    async with budget.hold(60) as held:
        block = block_buffer(40, held)  # 20 of the read's bytes went into no buffer
    assert budget.used == 0 and budget.held == 40
    log: list[int] = []
    release = asyncio.Event()
    release.set()
    waiting = asyncio.create_task(_holder(budget, 70, release, log))
    await asyncio.sleep(0.01)
    assert log == []  # 40 + 70 > 100: not while the block lives
    del block
    await asyncio.wait_for(waiting, 1)
    assert log == [70] and budget.held == 0


async def test_a_buffer_freed_on_another_thread_lets_the_waiting_read_in() -> None:
    budget = ReadBudget(100, 8, held_limit=50)
    async with budget.hold(50) as held:
        blocks = [block_buffer(25, held), block_buffer(2 << 20, held)]  # small, numpy-backed
    assert budget.held == 50
    log: list[int] = []
    release = asyncio.Event()
    release.set()
    waiting = asyncio.create_task(_holder(budget, 50, release, log))
    await asyncio.sleep(0.01)
    assert log == []
    await asyncio.to_thread(blocks.clear)  # the last references go in a worker thread
    await asyncio.wait_for(waiting, 1)
    assert log == [50] and budget.held == 0


async def test_the_bytes_in_flight_are_bound_apart_from_those_held() -> None:
    budget = ReadBudget(100, 8, held_limit=300)
    keep = []
    for _ in range(2):
        async with budget.hold(100) as held:
            keep.append(block_buffer(100, held))
    assert budget.held == 200 and budget.used == 0
    log: list[int] = []
    gate = asyncio.Event()
    tasks = [asyncio.create_task(_holder(budget, 100, gate, log)) for _ in range(2)]
    await asyncio.sleep(0.01)
    assert log == [100]  # 100 in flight at most, and 300 held at most
    gate.set()
    await asyncio.gather(*tasks)
    assert budget.held == 200
    keep.clear()
    assert budget.held == 0


async def test_a_decoded_block_is_charged_at_once_until_its_views_are_freed() -> None:
    """A codec's output is counted with no wait (past the bound if need be: a read that holds
    bytes never waits for more), and later reads wait until every view of it is freed."""
    budget = ReadBudget(100, 8, held_limit=100)
    decoded = budget.charged(bytes(range(120)))
    assert budget.held == 120 and bytes(decoded) == bytes(range(120))
    part = decoded[10:20]  # a view of the view keeps it charged
    del decoded
    log: list[int] = []
    release = asyncio.Event()
    release.set()
    waiting = asyncio.create_task(_holder(budget, 10, release, log))
    await asyncio.sleep(0.01)
    assert log == [] and bytes(part) == bytes(range(10, 20))
    del part
    await asyncio.wait_for(waiting, 1)
    assert log == [10] and budget.held == 0
