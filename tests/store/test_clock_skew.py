"""Two replicas on one backend whose clocks differ: last writer wins by stamps, and a replica
stamps what it takes after every stamp it has seen (s3kv/store/stamps.py), so a write or a
delete a client makes after it saw the other replica's stands on both and after restarts.

Both stores run in this process: B's clock is set back (``time.time``, patched) only while B
takes a request, which is when its stamps are given out; the backend is real (moto over HTTP,
a directory)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from unittest import mock

from s3kv.backends.base import Backend
from s3kv.store.stamps import Stamps
from s3kv.store.store import BlockStore
from tests.store.helpers import open_store, restart, segments_on_backend

#: how far B's clock is behind A's
SKEW = 10.0
#: replicas sync (so a segment of tombstones stays until the others could list it: carry.py),
#: here only when the test asks (their timers would fire after the test)
SYNC = 3600.0


async def _replica(backend: Backend, node: str) -> BlockStore:
    return await open_store(backend, node_id=node, seal_after=30, sync_interval=SYNC)


@contextlib.contextmanager
def behind(seconds: float = SKEW) -> Iterator[None]:
    real = time.time
    with mock.patch.object(time, "time", lambda: real() - seconds):
        yield


async def test_a_delete_through_a_replica_whose_clock_is_behind_deletes(
        backend: Backend) -> None:
    """B synced A's write, then a client deletes it through B: deleted on B at once, on A
    after a sync, and after restarts. Before, B's tombstone was stamped before A's write (B's
    clock), so B's delete answered False and the block stayed on both."""
    a = await _replica(backend, "node-a")
    b = await _replica(backend, "node-b")
    try:
        await a.create_namespace("kvns")
        await a.put("kvns", b"k", b"v1")
        await a.flush()
        await b.recovery_sync()
        assert await b.get("kvns", b"k") == b"v1"
        with behind():
            assert await b.delete("kvns", b"k")
        assert await b.get("kvns", b"k") is None
        await b.flush()
        await a.recovery_sync()
        assert await a.get("kvns", b"k") is None
        a = await restart(a, backend, node_id="node-a", sync_interval=SYNC)
        b = await restart(b, backend, node_id="node-b", sync_interval=SYNC)
        assert await a.get("kvns", b"k") is None and await b.get("kvns", b"k") is None
    finally:
        await asyncio.gather(a.close(), b.close())


async def test_a_write_after_a_delete_through_a_replica_whose_clock_is_behind_stands(
        backend: Backend) -> None:
    """A deletes k; B syncs the delete, then a client writes k through B (its clock behind):
    B serves the write, A too after a sync, and both after restarts. Before, B's write was
    stamped before A's delete: A never served it and B's restart lost it."""
    a = await _replica(backend, "node-a")
    b = await _replica(backend, "node-b")
    try:
        await a.create_namespace("kvns")
        await a.put("kvns", b"k", b"v1")
        await a.flush()
        await b.recovery_sync()
        assert await a.delete("kvns", b"k")
        await a.flush()
        await a.evict_now()  # k's dead segment goes; the tombstone stays for the replicas
        await a.evict_now()
        await b.recovery_sync()
        assert await b.get("kvns", b"k") is None
        with behind():
            await b.put("kvns", b"k", b"v2")
        await b.flush()
        await a.recovery_sync()
        assert await a.get("kvns", b"k") == b"v2"
        a = await restart(a, backend, node_id="node-a", sync_interval=SYNC)
        b = await restart(b, backend, node_id="node-b", sync_interval=SYNC)
        assert await a.get("kvns", b"k") == b"v2" and await b.get("kvns", b"k") == b"v2"
    finally:
        await asyncio.gather(a.close(), b.close())


async def test_a_namespace_created_again_through_a_replica_whose_clock_is_behind_lives(
        backend: Backend) -> None:
    """A deletes the namespace; B learns it, then a client creates it again through B and
    writes to it: the new namespace is A's too after a sync, and a restart keeps it and its
    block. Before, its record was stamped before A's deletion (B's clock): A never saw it, and
    B's restart dropped it with its block (NamespaceNotFound)."""
    a = await _replica(backend, "node-a")
    b = await _replica(backend, "node-b")
    try:
        await a.create_namespace("kvns")
        await b.recovery_sync()
        await a.delete_namespace("kvns")
        await b.recovery_sync()
        assert "kvns" not in b.namespaces
        with behind():
            await b.create_namespace("kvns")
            await b.put("kvns", b"k", b"new")
        await b.flush()
        await a.recovery_sync()
        assert await a.get("kvns", b"k") == b"new"
        b = await restart(b, backend, node_id="node-b", sync_interval=SYNC)
        assert await b.get("kvns", b"k") == b"new"
    finally:
        await asyncio.gather(a.close(), b.close())


def test_stamps_follow_the_clock_and_come_after_every_stamp_seen() -> None:
    stamps = Stamps()
    first = stamps.next()
    assert abs(first - time.time()) < 1 and stamps.next() > first
    ahead = time.time() + 100  # another replica's clock is ahead
    stamps.saw(ahead)
    assert stamps.next() > ahead
    stamps.saw(1.0)  # an older stamp changes nothing
    assert stamps.next() > ahead


def test_a_stamp_far_ahead_of_the_clock_is_not_followed() -> None:
    """A replica's clock an hour off, or a stamp no clock gave in a manifest another tool
    wrote: followed, it would carry every later stamp of every replica with it for good."""
    stamps = Stamps()
    now = time.time()
    stamps.saw(now + 3600)
    assert stamps.next() < now + 60
    stamps.saw(now + 30)  # a clock a little ahead: followed
    assert stamps.next() > now + 30


async def test_a_dead_segment_waits_for_its_killer_even_with_stamps_ahead_of_the_clock(
        backend: Backend) -> None:
    """This store saw a stamp 100 s ahead of its clock (a replica's), so its own stamps run
    ahead too; it deletes the last block of a segment (the tombstone in its open segment):
    the dead segment stays on the backend until the tombstone is (eviction.py, "dead"). Before,
    the death was timed by the clock, older than the open segment's stamps, and the segment
    went at once: a crash then lost the delete and the block both."""
    store = await open_store(backend, node_id="node-a", seal_after=30)
    try:
        await store.create_namespace("kvns")
        await store.put("kvns", b"k", b"v1")
        await store.flush()
        first = set(await segments_on_backend(backend))
        store.catalog.stamps.saw(time.time() + 100)
        assert await store.delete("kvns", b"k")
        await store.evict_now()
        assert first <= set(await segments_on_backend(backend))
        await store.flush()  # the tombstone is on the backend: now it goes
        await store.evict_now()
        assert not first & set(await segments_on_backend(backend))
    finally:
        await store.close()
