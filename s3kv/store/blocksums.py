"""Block checksums worked out as a landing's bytes arrive (store/landing.py, gateway/takeover.py).

A native batch put's blocks are received straight into their segment. Their CRCs used to be
computed once the whole body was in: one worker-thread hop over 16 MiB that the request waited
~5 ms for. Worked out on the event loop as each socket read lands, they made the loop ~25 %
busier per block (a read of several MiB leaves little of it in the CPU's cache). Now each
piece is queued as it arrives to one worker thread (:class:`SumWorker`) that keeps a running
CRC per block (:class:`BlockSums`): the loop only queues, the checksums run beside the
receive, and the request waits at the end for its last piece's share only (session 34 in
docs/performance-log.md: about the gateway CPU per block of the hop after the body, +2-5 % blocks
per second with the same client). When the request asks and the worker is through every piece
already (about two batch puts in three here), the values come at once, with no hop to the
worker and back (session 35).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Sequence
from functools import partial

from s3kv.log import get_logger
from s3kv.store import layout
from s3kv.wire.body import Pieces, pieces_of, size_of

log = get_logger(__name__)
Job = Callable[[], None]

#: checksums of blocks larger than this are computed off the event loop. The CRC runs at ~30
#: GB/s here on bytes just received (8 MiB: ~0.28 ms on the loop), while a hop to a worker
#: thread and back costs ~0.1 ms of CPU however small the block: at 1 MiB, 2 MiB blocks paid
#: 142 us of CPU for a 36 us checksum
THREAD_THRESHOLD = 8 * 1024 * 1024


async def checksum_async(data: Pieces) -> int:
    """The block's CRC (``layout.checksum``) of one buffer or of pieces, off the loop if large."""
    parts = pieces_of(data)
    if size_of(parts) > THREAD_THRESHOLD:
        return await asyncio.to_thread(layout.checksum_pieces, parts)
    return layout.checksum_pieces(parts)


class BlockSums:
    """The checksums (``layout.checksum``) of blocks of ``lengths``, fed their bytes in order,
    in pieces of any size (:meth:`feed`)."""

    def __init__(self, lengths: Sequence[int]) -> None:
        self._lengths = lengths
        self._crcs = [0] * len(lengths)
        self._block = -1  # the block being fed
        self._left = 0  # its bytes still to come
        self._next()

    def _next(self) -> None:
        """On to the next block that has bytes (an empty block's checksum is 0)."""
        self._block += 1
        while self._block < len(self._lengths) and not self._lengths[self._block]:
            self._block += 1
        self._left = self._lengths[self._block] if self._block < len(self._lengths) else 0

    def feed(self, data: memoryview) -> None:
        """The next bytes of the blocks, from where the last piece ended."""
        while data:
            if not self._left:
                raise ValueError("more bytes than the blocks' lengths add up to")
            n = min(self._left, len(data))
            i = self._block
            self._crcs[i] = layout.checksum_more(self._crcs[i], data[:n] if n < len(data)
                                                 else data)
            data = data[n:]
            self._left -= n
            if not self._left:
                self._next()

    def values(self) -> list[int]:
        """Each block's checksum; raises ValueError if bytes are still to come."""
        if self._left:
            raise ValueError(f"{self._left} bytes of block {self._block} are still to come")
        return list(self._crcs)


class RunningSums:
    """One landing's :class:`BlockSums`, fed on the worker's thread: :meth:`feed` from the
    event loop as pieces arrive, then ``await`` :meth:`values`."""

    def __init__(self, worker: SumWorker, lengths: Sequence[int]) -> None:
        self._worker = worker
        #: the blocks' lengths, in order
        self.lengths = lengths
        self._sums = BlockSums(lengths)
        self._settled: list[int] | None = None
        self._error: ValueError | None = None
        self._fed = 0  # pieces queued (on the loop)
        self._summed = 0  # pieces the worker is through with (written by the worker only)

    def feed(self, piece: memoryview) -> None:
        self._fed += 1
        self._worker.submit(partial(self._feed, piece))

    def _feed(self, piece: memoryview) -> None:  # on the worker's thread
        try:
            if self._error is None:
                self._sums.feed(piece)
        except ValueError as exc:
            self._error = exc
        finally:
            self._summed += 1

    def settle(self, crcs: list[int]) -> None:
        """The checksums are known, worked out as the bytes came (gateway/takeover.py's receive
        off the event loop): nothing is fed."""
        if self._fed or len(crcs) != len(self.lengths):
            raise ValueError("a landing's sums are either fed or settled, one per block")
        self._settled = crcs

    async def values(self) -> list[int]:
        """Each block's checksum, once the worker has every piece fed so far (at once if it
        has: no hop to the worker and back); raises ValueError if they are not the blocks'
        bytes, whole."""
        if self._settled is not None:
            return list(self._settled)
        if self._summed == self._fed:
            if self._error is not None:
                raise self._error
            return self._sums.values()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[int]] = loop.create_future()
        self._worker.submit(partial(self._finish, loop, done))
        return await done

    def _finish(self, loop: asyncio.AbstractEventLoop, done: asyncio.Future[list[int]]
                ) -> None:  # on the worker's thread
        try:
            if self._error is not None:
                raise self._error
            result = self._sums.values()
        except Exception as exc:  # the waiting request gets it, whatever it is
            _settle_soon(loop, done, exc)
            return
        _settle_soon(loop, done, result)


def _settle_soon(loop: asyncio.AbstractEventLoop, done: asyncio.Future[list[int]],
                 outcome: list[int] | Exception) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(_settle, done, outcome)


def _settle(done: asyncio.Future[list[int]], outcome: list[int] | Exception) -> None:
    if done.done():  # the request was cancelled meanwhile
        return
    if isinstance(outcome, Exception):
        done.set_exception(outcome)
    else:
        done.set_result(outcome)


class SumWorker:
    """One thread that runs the jobs queued to it in order (started on first use;
    :meth:`close` lets it finish what is queued and end, without waiting for it)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self, lengths: Sequence[int]) -> RunningSums:
        """Running checksums for blocks of ``lengths``."""
        if self._closed:
            raise RuntimeError("the checksum worker is closed")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="s3kv-blocksums",
                                            daemon=True)
            self._thread.start()
        return RunningSums(self, lengths)

    def submit(self, job: Job) -> None:
        self._jobs.put(job)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._jobs.put(None)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job()
            except Exception:  # a job settles its own waiter; the thread lives on
                log.exception("blocksums.job_failed")
            del job  # its piece is a view of a segment's window: not kept past its turn
