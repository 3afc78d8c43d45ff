"""Block checksums worked out as a landing's bytes arrive (s3kv/store/blocksums.py): fed in
pieces of any size, each block's checksum is layout.checksum of its bytes; the worker thread
does the pieces of each landing in order, hands the values back to the event loop, reports
bytes that do not add up as an error to the request waiting for them, and keeps no piece
(a view of a segment's window) once it is done with it."""

from __future__ import annotations

import asyncio
import gc
import os
import random
import threading

import pytest

from s3kv.sizes import KiB, MiB
from s3kv.store import layout
from s3kv.store.blocksums import BlockSums, SumWorker

SIZES = [0, 300 * KiB + 7, 0, 1, 64 * KiB, 0, 2 * MiB - 3, 0]


def _pieces(body: memoryview, rng: random.Random) -> list[memoryview]:
    """``body`` cut at random places (pieces that straddle blocks, split them, or are tiny)."""
    pieces, at = [], 0
    while at < len(body):
        n = rng.choice([1, 13, 4 * KiB, 300 * KiB, 1 * MiB, len(body)])
        pieces.append(body[at:at + n])
        at += n
    return pieces


def test_block_sums_follow_the_blocks_across_any_pieces() -> None:
    blobs = [os.urandom(n) for n in SIZES]
    body = memoryview(b"".join(blobs))
    rng = random.Random(7)
    for _ in range(20):
        sums = BlockSums(SIZES)
        for piece in _pieces(body, rng):
            sums.feed(piece)
        assert sums.values() == [layout.checksum(b) for b in blobs]
    short = BlockSums(SIZES)
    short.feed(body[:-1])
    with pytest.raises(ValueError, match="still to come"):
        short.values()
    over = BlockSums([3])
    with pytest.raises(ValueError, match="more bytes"):
        over.feed(memoryview(b"abcd"))
    assert BlockSums([0, 0]).values() == [0, 0] == [layout.checksum(b"")] * 2


async def test_the_worker_sums_interleaved_landings_each_in_order() -> None:
    worker = SumWorker()
    rng = random.Random(11)
    bodies = [[os.urandom(n) for n in SIZES] for _ in range(3)]
    runs = [worker.start(SIZES) for _ in bodies]
    feeds = [_pieces(memoryview(b"".join(blobs)), rng) for blobs in bodies]
    while any(feeds):  # the pieces of three bodies arrive interleaved, as on three connections
        for run, pieces in zip(runs, feeds, strict=True):
            if pieces:
                run.feed(pieces.pop(0))
    got = await asyncio.gather(*(run.values() for run in runs))
    assert got == [[layout.checksum(b) for b in blobs] for blobs in bodies]
    worker.close()


async def test_bytes_that_do_not_add_up_are_the_waiting_request_s_error() -> None:
    worker = SumWorker()
    short = worker.start([10, 5])
    short.feed(memoryview(b"x" * 12))
    with pytest.raises(ValueError, match="still to come"):
        await short.values()
    over = worker.start([4])
    over.feed(memoryview(b"abcd"))
    over.feed(memoryview(b"e"))
    with pytest.raises(ValueError, match="more bytes"):
        await over.values()
    ok = worker.start([2])  # the thread lives on after a landing's error
    ok.feed(memoryview(b"ok"))
    assert await ok.values() == [layout.checksum(b"ok")]
    worker.close()


async def test_the_worker_keeps_no_piece_and_ends_when_closed() -> None:
    before = set(threading.enumerate())
    worker = SumWorker()
    window = bytearray(os.urandom(64 * KiB))
    run = worker.start([len(window)])
    [thread] = [t for t in set(threading.enumerate()) - before if t.name == "s3kv-blocksums"]
    with memoryview(window) as view:
        run.feed(view[:40 * KiB])
        run.feed(view[40 * KiB:])
    assert await run.values() == [layout.checksum(window)]
    gc.collect()
    window.extend(b"x")  # BufferError while any view of it is alive: the worker kept none
    # a landing given up after its first piece: the worker goes idle on that piece's job
    given_up = worker.start([len(window)])
    with memoryview(window) as view:
        given_up.feed(view[:1 * KiB])
    for _ in range(200):
        try:
            window.extend(b"y")  # the worker has let the piece go
            break
        except BufferError:
            await asyncio.sleep(0.01)
    else:
        pytest.fail("the worker still holds a view of a piece it has summed")
    worker.close()
    await asyncio.to_thread(thread.join, 10)
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        worker.start([1])


async def test_values_come_at_once_when_the_worker_is_through_every_piece(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The values wait for the worker only while it has pieces left (a hop to the worker and
    back per batch put is CPU and a wake-up on each side); through them all, they come at once,
    an error too."""
    worker = SumWorker()
    asked: list[str] = []
    submit = worker.submit
    monkeypatch.setattr(worker, "submit", lambda job: (asked.append("job"), submit(job))[1])
    blobs = [os.urandom(n) for n in SIZES]
    run = worker.start(SIZES)
    for piece in _pieces(memoryview(b"".join(blobs)), random.Random(5)):
        run.feed(piece)
    fed = len(asked)
    waited = asyncio.create_task(run.values())  # may be asked before the worker is through
    assert await waited == [layout.checksum(b) for b in blobs]
    asked.clear()
    assert await run.values() == [layout.checksum(b) for b in blobs]  # through: at once
    assert asked == [] and fed > 1
    short = worker.start([10])
    short.feed(memoryview(b"x" * 4))
    loop = asyncio.get_running_loop()
    behind: asyncio.Future[None] = loop.create_future()  # the worker runs its jobs in order:
    submit(lambda: loop.call_soon_threadsafe(behind.set_result, None))  # through the piece
    await behind
    asked.clear()
    with pytest.raises(ValueError, match="still to come"):
        await short.values()
    assert asked == []
    worker.close()
