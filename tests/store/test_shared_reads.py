"""SharedReads: one load for the reads of a block that overlap, held briefly within a limit."""

from __future__ import annotations

import asyncio

import pytest

from s3kv.store.index import Location
from s3kv.store.shared_reads import SharedReads

LOC = Location(1, 0, 100, 100, 7, 0, 1.0)


class _Loads:
    def __init__(self, data: bytes, delay: float = 0.02, fail: bool = False) -> None:
        self.data, self.delay, self.fail, self.calls = data, delay, fail, 0

    async def __call__(self) -> bytes:
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.fail:
            raise OSError("backend down")
        return self.data


async def test_overlapping_reads_share_one_load_and_later_ones_use_the_held_block() -> None:
    shared, load = SharedReads(limit=1000, hold=0.2), _Loads(b"x" * 100)
    got = await asyncio.gather(*(shared.read((1, b"k", LOC), 10, load) for _ in range(5)))
    assert got == [b"x" * 100] * 5 and load.calls == 1 and shared.shared == 4
    assert await shared.read((1, b"k", LOC), 10, load) == b"x" * 100 and load.calls == 1
    other = Location(2, 0, 100, 100, 8, 0, 2.0)  # the key written again: another block
    await shared.read((1, b"k", other), 10, load)
    assert load.calls == 2
    await asyncio.sleep(0.3)  # past the hold: let go without another read
    assert shared.held_bytes == 0
    await shared.read((1, b"k", LOC), 10, load)
    assert load.calls == 3


async def test_the_limit_bounds_what_is_held() -> None:
    shared = SharedReads(limit=250, hold=10)
    for i in range(4):
        await shared.read((1, b"k%d" % i, LOC), 10, _Loads(b"y" * 100, delay=0))
    assert shared.held_bytes == 200  # the first two: held blocks are not dropped for newcomers
    assert (1, b"k0", LOC) in shared and (1, b"k3", LOC) not in shared
    await shared.read((1, b"big", LOC), 10, _Loads(b"z" * 300, delay=0))  # over the limit: not held
    assert shared.held_bytes == 200


async def test_a_failed_load_fails_its_readers_and_is_not_held() -> None:
    shared, load = SharedReads(limit=1000), _Loads(b"", fail=True)
    results = await asyncio.gather(*(shared.read((1, b"k", LOC), 10, load) for _ in range(3)),
                                   return_exceptions=True)
    assert all(isinstance(r, OSError) for r in results) and load.calls == 1
    assert shared.held_bytes == 0


async def test_a_reader_that_goes_away_does_not_fail_the_others() -> None:
    shared, load = SharedReads(limit=1000), _Loads(b"w" * 10, delay=0.05)
    first = asyncio.create_task(shared.read((1, b"k", LOC), 10, load))
    second = asyncio.create_task(shared.read((1, b"k", LOC), 10, load))
    await asyncio.sleep(0.01)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second == b"w" * 10 and load.calls == 1


async def test_a_block_is_let_go_once_every_byte_of_it_was_asked_for() -> None:
    shared, load = SharedReads(limit=1000, hold=10), _Loads(b"v" * 100)
    await asyncio.gather(*(shared.read((1, b"k", LOC), 25, load) for _ in range(2)))
    assert shared.held_bytes == 100  # half of it asked for: the other ranges are to come
    await shared.read((1, b"k", LOC), 25, load)
    assert shared.held_bytes == 100
    await shared.read((1, b"k", LOC), 25, load)  # the last range
    assert shared.held_bytes == 0 and load.calls == 1
    await asyncio.gather(*(shared.read((1, b"j", LOC), 50, load) for _ in range(2)))
    assert shared.held_bytes == 0 and load.calls == 2  # all asked for while in flight
