"""The streaming read path (s3kv/store/fetch.py): blocks come out in request order, reads run
a bounded window ahead, closing early cancels what is still being read, and a corrupt block in
the middle of a chain is a miss while its neighbours still arrive."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

from s3kv.backends.base import Backend, RangeViewer, Sink
from s3kv.sizes import KiB
from s3kv.store import layout
from s3kv.store.store import BlockStore
from s3kv.wire.body import pieces_of
from tests.store.helpers import open_store, put_chain

BLOCK = 512 * KiB
N = 60  # ~19 blocks per 10 MiB segment: the chain spans 4 segments, so 4 coalesced reads


async def _chain(backend: Backend, n: int = N, size: int = BLOCK, *, flush: bool = True
                 ) -> tuple[BlockStore, list[bytes], list[bytes]]:
    """A store holding a chain of ``n`` blocks, on the backend once ``flush``ed."""
    store = await open_store(backend, seal_after=30)
    await store.create_namespace("kvns")
    keys, blocks = await put_chain(store, n, size, flush=flush)
    return store, keys, blocks


async def test_stream_in_order_with_bounded_read_ahead(backend: Backend) -> None:
    store, keys, blocks = await _chain(backend)
    try:
        nid = store.ns_id("kvns")
        fetcher = store.fetcher
        stats = store.stats
        locs = [store.index.get(nid, k) for k in keys]
        runs = len({loc.segment for loc in locs if loc is not None})
        assert runs >= 3
        before = stats.backend_reads
        got: list[bytes | memoryview | None] = []
        async with aclosing(fetcher.iter_many(nid, [*keys, b"absent"], read_ahead=0)) as it:
            async for b in it:
                if not got:  # no read-ahead: only the first coalesced read has been issued
                    await asyncio.sleep(0.05)
                    assert stats.backend_reads - before == 1
                got.append(b)
        assert got[:-1] == blocks and got[-1] is None
        assert stats.backend_reads - before == runs
    finally:
        await store.close()


class _HeldReads:
    """The real backend, except that ranged reads after the first wait for ``release``: reads
    on a local directory finish too fast to be caught in flight otherwise."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.release = asyncio.Event()
        self.calls = 0
        if isinstance(backend, RangeViewer):  # a viewer stays one, held like the others
            self.view_range = self._view_range

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def get_range(self, key: str, start: int, length: int) -> bytes | bytearray:
        self.calls += 1
        if self.calls > 1:
            await self.release.wait()
        return await self._backend.get_range(key, start, length)

    async def stream_range(self, key: str, start: int, length: int, sink: Sink) -> int:
        data = await self.get_range(key, start, length)
        sink(memoryview(data))
        return len(data)

    async def _view_range(self, key: str, start: int, length: int) -> memoryview:
        """The file backend lends ranges as views of its memory map: held the same way."""
        self.calls += 1
        if self.calls > 1:
            await self.release.wait()
        assert isinstance(self._backend, RangeViewer)
        return await self._backend.view_range(key, start, length)


async def test_closing_early_cancels_reads_in_flight(backend: Backend) -> None:
    store, keys, blocks = await _chain(backend)
    try:
        held = _HeldReads(backend)
        store.fetcher.backend = held
        it = store.iter_many("kvns", keys)
        assert await anext(it) == blocks[0]
        await asyncio.sleep(0.05)
        pending = [t for t in asyncio.all_tasks() if "_read_run" in repr(t.get_coro())]
        assert pending and held.calls > 1, "the window's later reads should be in flight"
        await it.aclose()
        await asyncio.sleep(0)
        assert all(t.cancelled() for t in pending)
        held.release.set()
        store.fetcher.backend = backend
        # the store still serves the whole chain afterwards
        assert await store.get_many("kvns", keys) == blocks
    finally:
        await store.close()


async def test_corrupt_block_mid_chain_is_a_miss(backend: Backend) -> None:
    store, keys, blocks = await _chain(backend)
    try:
        nid = store.ns_id("kvns")
        loc = store.index.get(nid, keys[25])
        assert loc is not None
        info = store.segments.get(loc.segment)
        assert info is not None
        seg_key = f"segments/{info.name}.seg"
        raw = bytearray(await backend.get_object(seg_key))
        raw[loc.offset + 7] ^= 0xFF  # one byte inside block 25, on the backend
        await backend.put_object(seg_key, bytes(raw))
        got = [b async for b in store.iter_many("kvns", keys)]
        assert got[25] is None
        assert got[:25] == blocks[:25] and got[26:] == blocks[26:]
        assert store.stats.checksum_failures == 1
    finally:
        await store.close()


async def test_blocks_of_a_segment_sealed_mid_request_come_from_the_backend(
        backend: Backend) -> None:
    """A request planned while the writer held the segment, which is sealed and let go before
    the later blocks are due: those are read from the backend, byte for byte."""
    store, keys, blocks = await _chain(backend, 8, 64 * KiB, flush=False)
    try:
        nid = store.ns_id("kvns")
        loc = store.index.get(nid, keys[0])
        assert loc is not None and store.writer.holds(loc.segment)
        it = store.iter_many("kvns", keys)
        first = await anext(it)  # from memory: views of the pieces the segment holds
        assert first is not None and b"".join(pieces_of(first)) == blocks[0]
        await store.flush()
        assert not store.writer.holds(loc.segment)
        before = store.stats.backend_reads
        rest = [b async for b in it]
        assert rest == blocks[1:]
        assert store.stats.backend_reads - before == 1  # the rest, coalesced into one read
    finally:
        await store.close()


def _flip(path: Any, offset: int) -> None:
    """Change one byte of a file in place (the mapping sees it: a shared page)."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        old = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([old[0] ^ 0xFF]))


async def test_a_block_at_hand_is_read_without_a_worker_thread(tmp_path: Any) -> None:
    """``BlockStore.read`` (the S3 front's GET) takes a sealed block whose mapped pages are in
    memory on the event loop: same bytes, same counters, and a corrupt one is still a miss."""
    from s3kv.backends import FileBackend

    backend = await FileBackend(tmp_path / "store").open()
    store, keys, blocks = await _chain(backend, 4, 64 * KiB)
    try:
        assert await store.read("kvns", keys[0]) is not None  # maps the segment file
        reads, threads = store.stats.backend_reads, []

        async def no_thread(*args: object) -> memoryview:
            threads.append(args)
            raise AssertionError("the worker-thread path was taken")

        backend.view_range = no_thread  # type: ignore[method-assign]
        got = await store.read("kvns", keys[2])
        assert got is not None and b"".join(pieces_of(got)) == blocks[2] and not threads
        assert store.stats.backend_reads == reads + 1
        # the same block corrupted on disk: a miss, counted, dropped from the index
        loc = store.index.get(store.ns_id("kvns"), keys[3])
        info = store.segments.get(loc.segment) if loc is not None else None
        assert loc is not None and info is not None
        _flip(tmp_path / "store" / "segments" / f"{info.name}.seg", loc.offset + 5)
        assert await store.read("kvns", keys[3]) is None
        assert store.stats.checksum_failures == 1
        assert store.index.get(store.ns_id("kvns"), keys[3]) is None
    finally:
        await store.close()
        await backend.close()


async def test_blocks_at_hand_in_a_batch_are_read_without_a_task_or_thread(
        tmp_path: Any) -> None:
    """``iter_many`` (the native batch get) takes each coalesced run of a sealed segment whose
    mapped pages are in memory from the backend at once, on the event loop: one backend read
    for the run, no worker thread, no read task; a corrupt block is still a miss."""
    from s3kv.backends import FileBackend

    backend = await FileBackend(tmp_path / "store").open()
    store, keys, blocks = await _chain(backend, 8, 64 * KiB)
    try:
        assert await store.read("kvns", keys[0]) is not None  # maps the segment file
        threads: list[object] = []

        async def no_thread(*args: object) -> memoryview:
            threads.append(args)
            raise AssertionError("the worker-thread path was taken")

        backend.view_range = no_thread  # type: ignore[method-assign]
        loc = store.index.get(store.ns_id("kvns"), keys[6])
        info = store.segments.get(loc.segment) if loc is not None else None
        assert loc is not None and info is not None
        _flip(tmp_path / "store" / "segments" / f"{info.name}.seg", loc.offset + 5)
        wanted = [keys[1], keys[2], keys[5], keys[6], keys[3]]  # one run: 1-6 (gap: 4)
        reads, tasks = store.stats.backend_reads, len(asyncio.all_tasks())
        got = []
        async with aclosing(store.iter_many("kvns", wanted)) as it:
            async for b in it:
                assert len(asyncio.all_tasks()) == tasks  # no read task was started
                got.append(None if b is None else b"".join(pieces_of(b)))
        assert got == [blocks[1], blocks[2], blocks[5], None, blocks[3]] and not threads
        assert store.stats.backend_reads == reads + 1
        assert store.stats.checksum_failures == 1
    finally:
        await store.close()
        await backend.close()


async def test_lent_blocks_come_unverified_to_a_reader_that_checks_them(tmp_path: Any) -> None:
    """``iter_unverified`` (the native batch get with the compiled send) hands blocks the
    backend lends as :class:`Unverified`, counted as hits; ``reject()`` makes one the miss a
    corrupt block is (counted, forgotten). A block the writer holds in memory comes checked."""
    from s3kv.backends import FileBackend
    from s3kv.store.unverified import Unverified

    backend = await FileBackend(tmp_path / "store").open()
    store, keys, blocks = await _chain(backend, 6, 64 * KiB)
    try:
        await store.put("kvns", b"open", b"o" * 1000)  # in the open segment
        got = [b async for b in store.iter_unverified("kvns", [*keys, b"open", b"absent"])]
        lent = [g for g in got[:6] if isinstance(g, Unverified)]
        assert len(lent) == 6 and [bytes(u.view) for u in lent] == blocks
        assert [u.crc for u in lent] == [layout.checksum(b) for b in blocks]
        assert got[6] is not None and b"".join(pieces_of(got[6])) == b"o" * 1000  # checked
        assert got[7] is None
        hits, misses = store.stats.hits, store.stats.misses
        lent[2].reject()
        assert (store.stats.hits, store.stats.misses) == (hits - 1, misses + 1)
        assert store.stats.checksum_failures == 1
        assert store.index.get(store.ns_id("kvns"), keys[2]) is None
    finally:
        await store.close()
        await backend.close()


async def test_get_many_of_more_than_the_read_memory_returns(backend: Backend) -> None:
    """A list of blocks holds them all; were they the read buffers themselves, the later reads
    would wait for ever for the memory the list holds (readbudget.py). 4 runs of ~9.5 MiB
    against 12 MiB of read memory."""
    store, keys, blocks = await _chain(backend)
    await store.close()
    store = await open_store(backend, seal_after=30, read_ahead=0,
                             max_read_memory=12 * 1024 * KiB)
    try:
        got = await asyncio.wait_for(store.get_many("kvns", keys), 20)
        assert got == blocks
    finally:
        await store.close()
