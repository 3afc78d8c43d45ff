"""A coalesced read handed out block by block (s3kv/store/runread.py): whatever pieces the
backend delivers the bytes in, each block comes out whole as soon as its last byte is in, gaps
are skipped, a retried read does not disturb blocks already complete, and whatever the read did
not deliver is a miss."""

from __future__ import annotations

import asyncio
import itertools
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from s3kv.store.index import Location
from s3kv.store.reader import ReadRun
from s3kv.store.runread import RunRead


def _layout(sizes: list[int], gaps: list[int]) -> tuple[bytes, list[Location]]:
    """A segment's bytes from 100 on: blocks of ``sizes`` with ``gaps`` of junk before each."""
    seg = bytearray(os.urandom(100))
    locs = []
    for size, gap in zip(sizes, gaps, strict=True):
        seg += b"\xee" * gap
        locs.append(Location(1, len(seg), size, size, 0, 0, 0.0))
        seg += os.urandom(size)
    return bytes(seg), locs


def _run(locs: list[Location], positions: list[int] | None = None) -> RunRead:
    members = list(zip(positions or range(len(locs)), locs, strict=True))
    first, last = locs[0], locs[-1]
    return RunRead(ReadRun(1, first.offset, last.offset + last.length, members))


def _feed_in(run: RunRead, data: bytes, cuts: list[int]) -> None:
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    view = memoryview(data)
    for a, b in itertools.pairwise(edges):
        run.feed(view[a:b])


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=8),
       gap=st.integers(0, 700), cuts=st.lists(st.integers(0, 30_000), max_size=40))
def test_any_delivery_gives_every_block_whole(sizes: list[int], gap: int,
                                              cuts: list[int]) -> None:
    async def go() -> None:
        seg, locs = _layout(sizes, [0] + [gap] * (len(sizes) - 1))
        run = _run(locs)
        _feed_in(run, seg[locs[0].offset:locs[-1].offset + locs[-1].length], cuts)
        run.finish()
        for loc in locs:
            got = await run.block(loc)
            assert got is not None and bytes(got) == seg[loc.offset:loc.offset + loc.length]

    asyncio.run(go())


def test_a_block_is_out_before_the_read_ends_and_the_rest_are_misses() -> None:
    async def go() -> None:
        seg, locs = _layout([1000, 1000, 1000], [0, 64, 64])
        run = _run(locs)
        start = locs[0].offset
        run.feed(memoryview(seg)[start:locs[1].offset + 10])  # block 0 and a bit of block 1
        first = asyncio.ensure_future(run.block(locs[0]))
        second = asyncio.ensure_future(run.block(locs[1]))
        await asyncio.sleep(0)
        assert first.done() and not second.done()
        assert bytes(first.result() or b"") == seg[start:start + 1000]
        run.finish()  # the read broke off: what did not arrive is a miss, never a partial block
        assert await second is None
        assert await run.block(locs[2]) is None

    asyncio.run(go())


def test_a_retry_restarts_without_disturbing_complete_blocks() -> None:
    async def go() -> None:
        seg, locs = _layout([500, 700, 300], [0, 0, 100])
        run = _run(locs)
        start, end = locs[0].offset, locs[-1].offset + locs[-1].length
        run.feed(memoryview(seg)[start:locs[1].offset + 200])  # then the connection drops
        taken = await run.block(locs[0])
        assert taken is not None and bytes(taken) == seg[start:start + 500]
        run.restart()  # the retry sends from the first byte again, with other bytes for the
        run.feed(memoryview(b"\x00" * 500))  # block already complete: never copied over
        run.feed(memoryview(seg)[start + 500:end])
        run.finish()
        assert bytes(taken) == seg[start:start + 500]
        for loc in locs[1:]:
            got = await run.block(loc)
            assert got is not None and bytes(got) == seg[loc.offset:loc.offset + loc.length]

    asyncio.run(go())


def test_a_block_asked_twice_is_given_to_both() -> None:
    async def go() -> None:
        seg, locs = _layout([400, 400], [0, 0])
        run = _run([locs[0], locs[1], locs[0]], [0, 1, 2])
        run.feed(memoryview(seg)[locs[0].offset:locs[1].offset + 400])
        run.finish()
        want = seg[locs[0].offset:locs[0].offset + 400]
        assert bytes(await run.block(locs[0]) or b"") == want
        assert bytes(await run.block(locs[1]) or b"") == seg[locs[1].offset:locs[1].offset + 400]
        assert bytes(await run.block(locs[0]) or b"") == want

    asyncio.run(go())


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=8),
       gap=st.integers(0, 700), chunks=st.lists(st.integers(1, 5000), max_size=40),
       in_place=st.lists(st.booleans(), max_size=40))
def test_bytes_received_in_place_give_the_same_blocks(sizes: list[int], gap: int,
                                                      chunks: list[int],
                                                      in_place: list[bool]) -> None:
    """A backend receiving into ``space`` where it can (``landed``) and through ``feed``
    where it cannot, in any mix and any chunking, gives every block whole."""
    async def go() -> None:
        seg, locs = _layout(sizes, [0] + [gap] * (len(sizes) - 1))
        run = _run(locs)
        data = memoryview(seg)[locs[0].offset:locs[-1].offset + locs[-1].length]
        pos, i = 0, 0
        while pos < len(data):
            want = chunks[i % len(chunks)] if chunks else len(data)
            space = run.space() if in_place and in_place[i % len(in_place)] else None
            if space is not None:
                n = min(want, len(space), len(data) - pos)
                space[:n] = data[pos:pos + n]
                run.landed(n)
            else:
                n = min(want, len(data) - pos)
                run.feed(data[pos:pos + n])
            pos += n
            i += 1
        run.finish()
        for loc in locs:
            got = await run.block(loc)
            assert got is not None and bytes(got) == seg[loc.offset:loc.offset + loc.length]

    asyncio.run(go())


def test_a_windows_first_bytes_are_out_before_the_rest_of_it() -> None:
    """``upto``: a read-ahead window is one member; each block cut from it goes out once its
    own bytes are in (received in place or fed), not once the whole window is; a retry leaves
    the views already given intact; what the read never delivered is None."""
    async def go() -> None:
        seg, (loc,) = _layout([10_000], [0])
        start = loc.offset
        want = seg[start:start + 10_000]
        run = _run([loc])
        early = [asyncio.ensure_future(run.upto(loc, start + n)) for n in (1000, 5000, 9000)]
        space = run.space()  # the S3 backend's path: received in place
        assert space is not None
        space[:3000] = want[:3000]
        run.landed(3000)
        for _ in range(5):  # the waiting tasks run (through asyncio.shield)
            await asyncio.sleep(0)
        assert early[0].done() and not early[1].done()
        assert bytes(early[0].result() or b"") == want[:1000]
        now = await run.upto(loc, start + 2000)  # in already: no wait
        assert bytes(now or b"") == want[:2000]
        run.restart()  # the connection dropped: the retry sends from the first byte again
        run.feed(memoryview(want)[:6000])
        for _ in range(5):  # the waiting tasks run (through asyncio.shield)
            await asyncio.sleep(0)
        assert early[1].done() and not early[2].done()
        assert bytes(early[1].result() or b"") == want[:5000]
        run.finish()  # then the read broke off for good
        assert await early[2] is None
        assert await run.upto(loc, start + 9500) is None
        assert bytes(early[0].result() or b"") == want[:1000]  # the first view is intact

    asyncio.run(go())


def test_a_complete_window_is_cut_from_its_whole_bytes() -> None:
    async def go() -> None:
        seg, (loc,) = _layout([4096], [0])
        run = _run([loc])
        run.feed(memoryview(seg)[loc.offset:loc.offset + 4096])
        got = await run.upto(loc, loc.offset + 100)
        assert bytes(got or b"") == seg[loc.offset:loc.offset + 100]
        assert bytes(await run.upto(loc, loc.offset + 4096) or b"") \
            == seg[loc.offset:loc.offset + 4096]

    asyncio.run(go())


def test_a_window_lent_whole_answers_the_reads_waiting_for_its_first_bytes() -> None:
    """A backend that lends the run as one view (a memory map) resolves ``upto`` too."""
    async def go() -> None:
        seg, (loc,) = _layout([8192], [0])
        run = _run([loc])
        waiting = asyncio.ensure_future(run.upto(loc, loc.offset + 3000))
        await asyncio.sleep(0)
        run.lend(memoryview(seg)[loc.offset:loc.offset + 8192])
        run.finish()
        assert bytes(await waiting or b"") == seg[loc.offset:loc.offset + 3000]

    asyncio.run(go())
