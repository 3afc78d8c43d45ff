"""Backend outages against a real S3 server process that we stop, pause and start again."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from s3kv.backends import FileBackend
from s3kv.errors import BackendError, Backpressure
from s3kv.sizes import KiB
from s3kv.store.store import BlockStore
from tests.store.conftest import open_s3
from tests.store.helpers import block, open_store, put_chain
from tests.support.s3server import MotoServer


async def _put_until_backpressure(store: BlockStore, limit: float) -> float:
    start = time.monotonic()
    i = 0
    while time.monotonic() - start < limit:
        try:
            await store.put("kvns", f"o{i}".encode(), block(i, 256 * KiB))
        except Backpressure:
            return time.monotonic() - start
        i += 1
        await asyncio.sleep(0.01)
    raise AssertionError(f"no backpressure within {limit}s")


async def _put_eventually(store: BlockStore, key: bytes, data: bytes, limit: float) -> None:
    """What a client does with 503 SlowDown: retry until the store takes the write."""
    deadline = time.monotonic() + limit
    while True:
        try:
            await store.put("kvns", key, data, durable=True)
            return
        except (Backpressure, BackendError):
            assert time.monotonic() < deadline, "store did not recover"
            await asyncio.sleep(0.5)


async def test_server_stopped_gives_backpressure_then_recovers(
        private_s3_server: MotoServer) -> None:
    server = private_s3_server
    backend = await open_s3(server.endpoint, "outage", request_timeout=2.0)
    store = await open_store(backend, seal_after=0.3, backend_timeout=2.0)
    try:
        await store.create_namespace("kvns")
        await store.put("kvns", b"before", b"x" * 1000, durable=True)
        server.stop()
        elapsed = await _put_until_backpressure(store, limit=30)
        assert elapsed < 30
        deadline = time.monotonic() + 20
        while store.writer.health.healthy:  # the failed uploads mark the backend down
            assert time.monotonic() < deadline, "outage not detected"
            await asyncio.sleep(0.1)
        try:  # and from then on writes are refused at once, without queueing
            t0 = time.monotonic()
            await store.put("kvns", b"during", b"x")
            raise AssertionError("a write was accepted while the backend is down")
        except Backpressure:
            assert time.monotonic() - t0 < 0.5
        # reads still answer: a miss (backend down), never an exception
        assert await store.get("kvns", b"before") is None
        # memory stays bounded by the open-segment budget
        assert store.writer.open_segments <= store.settings.max_open_segments
        # the server comes back (empty, as moto does): recreate the bucket, writes resume
        server.start()
        await backend.ensure_bucket()
        await _put_eventually(store, b"after", b"y" * 1000, limit=30)
        assert store.writer.health.healthy
        assert await store.get("kvns", b"after") == b"y" * 1000
    finally:
        await store.close()
        await backend.close()


async def test_hung_server_gives_backpressure(private_s3_server: MotoServer) -> None:
    """SIGSTOP: connections are accepted but never answered (timeouts, not refusals)."""
    server = private_s3_server
    backend = await open_s3(server.endpoint, "hung", request_timeout=1.5)
    store = await open_store(backend, seal_after=0.2, backend_timeout=1.5)
    try:
        await store.create_namespace("kvns")
        server.pause()
        elapsed = await _put_until_backpressure(store, limit=40)
        assert elapsed < 40
        server.resume()
        deadline = time.monotonic() + 30
        while not store.writer.health.healthy:
            assert time.monotonic() < deadline, "store did not recover"
            await asyncio.sleep(0.2)
        await _put_eventually(store, b"again", b"z" * 100, limit=30)
        assert await store.get("kvns", b"again") == b"z" * 100
    finally:
        server.resume()
        await store.close()
        await backend.close()


async def test_reads_on_a_hung_server_miss_after_the_read_stall(
        private_s3_server: MotoServer) -> None:
    """SIGSTOP: a ranged read is given up once it has gone ``read_stall`` seconds without a
    byte (a miss, not retried), not after the request timeout (20 s here)."""
    server = private_s3_server
    backend = await open_s3(server.endpoint, "stall", request_timeout=20.0, read_stall=1.0)
    store = await open_store(backend, seal_after=0.2, backend_timeout=20.0, dram_cache=0)
    try:
        await store.create_namespace("kvns")
        keys, blocks = await put_chain(store, 4, 300 * KiB, "k")
        server.pause()
        try:
            t0 = time.monotonic()
            got = await store.get_many("kvns", keys)
            took = time.monotonic() - t0
        finally:
            server.resume()
        assert got == [None] * 4
        assert took < 8, took  # ~1-1.5 s; 20 s without the guard
        assert await store.get_many("kvns", keys) == blocks  # the index kept every block
    finally:
        server.resume()
        await store.close()
        await backend.close()


async def test_a_segment_sealed_after_a_failure_marks_the_backend_up(tmp_path: Path) -> None:
    """A segment opened during an outage can fail after the backend is back (moto restarts
    empty: its uploads meet NoSuchBucket); a segment sealed since then proves the backend takes
    writes, so writes are not refused until the next probe. The failure is marked by hand here:
    the outage test above meets it only when its timing falls that way."""
    backend = await FileBackend(tmp_path / "store").open()
    store = await open_store(backend, seal_after=60)
    try:
        await store.create_namespace("kvns")
        await store.put("kvns", b"open", b"x" * 1000)  # its segment is open, not yet sealed
        store.writer.health.mark_down("a segment opened during an outage failed")
        try:
            await store.put("kvns", b"refused", b"x")
            raise AssertionError("a write was accepted while the backend is marked down")
        except Backpressure:
            pass
        await store.flush()  # the open segment seals: the backend took a write
        assert store.writer.health.healthy
        await store.put("kvns", b"after", b"y" * 100)
        await store.flush()  # durable (a durable put would wait for seal_after)
        assert await store.get("kvns", b"after") == b"y" * 100
        assert await store.get("kvns", b"open") == b"x" * 1000
    finally:
        await store.close()
        await backend.close()


async def test_a_delete_that_cannot_be_recorded_is_refused_and_the_block_stays(
        tmp_path: Path) -> None:
    """Its tombstone cannot be appended while the backend is marked down: the delete raises
    (503 at the gateway) instead of dropping the block from the index alone, which a restart
    then undid. Once the backend is back the delete holds, across a restart too."""
    backend = await FileBackend(tmp_path / "store").open()
    store = await open_store(backend, seal_after=60)
    try:
        await store.create_namespace("kvns")
        await store.put("kvns", b"k", b"x" * 1000)
        await store.flush()
        store.writer.health.mark_down("a segment upload failed")
        with pytest.raises(Backpressure):
            await store.delete("kvns", b"k")
        assert await store.get("kvns", b"k") == b"x" * 1000
        store.writer.health.mark_up()
        assert await store.delete("kvns", b"k")
        await store.close()
        store = await open_store(backend, seal_after=60)
        assert await store.get("kvns", b"k") is None
    finally:
        await store.close()
        await backend.close()


class _FailingSegments:
    """The file backend underneath; while ``failing``, writes of segment objects fail (not
    transient: the upload gives up at once), as a backend that lost a segment's upload."""

    def __init__(self, inner: FileBackend) -> None:
        self._inner = inner
        self.failing = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def put_object(self, key: str, data: object) -> None:
        if self.failing and key.startswith("segments/"):
            raise BackendError(f"PUT {key}: injected failure")
        await self._inner.put_object(key, data)  # type: ignore[arg-type]


async def _a_segment_fails_over_k_and_j(store: BlockStore, backend: _FailingSegments) -> None:
    """k and j in a segment A; then k overwritten and j deleted in a segment F whose upload
    fails: k's new value and j's delete are lost. The backend is back afterwards."""
    await store.create_namespace("kvns")
    await store.put("kvns", b"k", b"old" * 100)
    await store.put("kvns", b"j", b"j" * 100)
    await store.flush()  # A
    await store.put("kvns", b"k", b"new" * 100)
    await store.delete("kvns", b"j")
    backend.failing = True
    with pytest.raises(BackendError):
        await store.flush()  # F fails
    backend.failing = False


async def test_what_a_failed_segment_hid_stays_hidden_after_a_restart(tmp_path: Path) -> None:
    """A segment whose upload failed loses its write-back blocks and deletes (the index forgot
    them); a restart must not serve older versions of them from older segments instead: the
    overwritten block's old value, the deleted block. Its entries' tombstones go into the next
    segment."""
    inner = await FileBackend(tmp_path / "store").open()
    backend = _FailingSegments(inner)
    store = await open_store(backend, seal_after=30)  # type: ignore[arg-type]
    try:
        await _a_segment_fails_over_k_and_j(store, backend)
        assert await store.get("kvns", b"k") is None and await store.get("kvns", b"j") is None
        deadline = time.monotonic() + 10
        while not store.writer.health.healthy:  # the probe finds the backend up
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await store.put("kvns", b"x", b"x" * 100)
        await store.close()
        store = await open_store(backend, seal_after=30)  # type: ignore[arg-type]
        assert await store.get("kvns", b"k") is None  # not A's old value
        assert await store.get("kvns", b"j") is None  # not back
        assert await store.get("kvns", b"x") == b"x" * 100
    finally:
        await store.close()
        await inner.close()


async def test_what_a_failed_segment_hid_stays_hidden_when_the_store_closes_next(
        tmp_path: Path) -> None:
    """No segment opens between the failure and the close (nothing written): the close writes
    the tombstones in a segment of their own, as the next segment would have taken them."""
    inner = await FileBackend(tmp_path / "store").open()
    backend = _FailingSegments(inner)
    store = await open_store(backend, seal_after=30)  # type: ignore[arg-type]
    try:
        await _a_segment_fails_over_k_and_j(store, backend)
        await store.close()  # the backend is back, but the store is marked down: no probe yet
        store = await open_store(backend, seal_after=30)  # type: ignore[arg-type]
        assert await store.get("kvns", b"k") is None
        assert await store.get("kvns", b"j") is None
    finally:
        await store.close()
        await inner.close()


async def test_a_flush_after_a_failed_segment_puts_its_tombstones_on_the_backend(
        tmp_path: Path) -> None:
    """Nothing written since the failure: a flush writes the failed segment's tombstones (a
    delete is on the backend once a flush answers), so a crash after it (the store never
    closed) does not bring back the deleted block, nor the overwritten one's old value."""
    inner = await FileBackend(tmp_path / "store").open()
    backend = _FailingSegments(inner)
    store = await open_store(backend, seal_after=30)  # type: ignore[arg-type]
    after = None
    try:
        await _a_segment_fails_over_k_and_j(store, backend)
        await store.flush()  # answers: what the store was told is on the backend
        after = await open_store(inner, seal_after=30, node_id="after-crash")
        assert await after.get("kvns", b"j") is None  # not back
        assert await after.get("kvns", b"k") is None  # not A's old value
    finally:
        await store.close()
        if after is not None:
            await after.close()
        await inner.close()
