"""Two replicas on one backend: a delete through one is not undone when the other's older write
of the key arrives by sync (s3kv/store/deletes.py)."""

from __future__ import annotations

import asyncio
import time

from s3kv.backends.base import Backend
from s3kv.store.deletes import RecentDeletes
from tests.store.helpers import open_store, restart


async def test_an_older_write_synced_after_a_delete_stays_deleted(backend: Backend) -> None:
    a = await open_store(backend, node_id="node-a", seal_after=30)
    b = await open_store(backend, node_id="node-b", seal_after=30)
    try:
        await a.create_namespace("kvns")
        await a.put("kvns", b"k", b"v1")
        await a.put("kvns", b"x", b"x1")
        await a.flush()
        await b.recovery_sync()
        assert await b.get("kvns", b"k") == b"v1"
        await a.put("kvns", b"k", b"v2")  # in a's open segment
        assert await b.delete("kvns", b"k")  # newer: the last writer, so k is deleted
        await b.flush()
        await a.recovery_sync()  # a learns the delete (its v2 is older)
        assert await a.get("kvns", b"k") is None
        await a.flush()  # a's v2 reaches the backend after b's delete
        await b.recovery_sync()
        assert await b.get("kvns", b"k") is None  # was v2, until a restart
        # a delete learnt by sync stands too, against a write older still that comes later
        await a.put("kvns", b"x", b"x2")
        await b.put("kvns", b"x", b"x3")
        assert await b.delete("kvns", b"x")
        await b.flush()
        await a.recovery_sync()
        await a.flush()
        await b.recovery_sync()
        assert await a.get("kvns", b"x") is None
        assert await b.get("kvns", b"x") is None
        # and a write newer than the delete is served
        await a.put("kvns", b"k", b"v3")
        await a.flush()
        await b.recovery_sync()
        assert await b.get("kvns", b"k") == b"v3"
    finally:
        await asyncio.gather(a.close(), b.close())


def test_recent_deletes_are_kept_for_their_window_only() -> None:
    deletes = RecentDeletes(window=0.0)  # kept only SLACK seconds
    deletes.note("ns", b"old", 1.0)  # long ago: nothing can bring an older write by sync
    assert len(deletes) == 0
    now = time.time()
    deletes.note("ns", b"k", now)
    assert deletes.hides("ns", b"k", now - 1) and not deletes.hides("ns", b"k", now + 1)
    assert not deletes.hides("other", b"k", now - 1)


async def test_a_delete_of_a_block_not_synced_yet_stands_after_the_sync(backend: Backend) -> None:
    """b has not seen a's write of k (a's segment is sealed, b's sync has not run) when the
    client deletes k through b: the delete is a tombstone all the same (False: b held no such
    block), so neither b's sync nor a restart of either brings k back. Before, b wrote nothing
    and k came back on b at its next sync, and stayed on a."""
    a = await open_store(backend, node_id="node-a", seal_after=30)
    b = await open_store(backend, node_id="node-b", seal_after=30)
    try:
        await a.create_namespace("kvns")
        await b.recovery_sync()  # b knows the namespace, not yet the block
        await a.put("kvns", b"k", b"v1")
        await a.flush()
        assert await b.get("kvns", b"k") is None
        assert not await b.delete("kvns", b"k")  # nothing here to delete: still a tombstone
        await b.recovery_sync()  # a's segment arrives: its older write stays deleted
        assert await b.get("kvns", b"k") is None
        await b.flush()
        await a.recovery_sync()  # and a learns the delete
        assert await a.get("kvns", b"k") is None
        a = await restart(a, backend, node_id="node-a")
        assert await a.get("kvns", b"k") is None
    finally:
        await asyncio.gather(a.close(), b.close())


async def test_a_segment_whose_writer_died_before_its_sidecar_is_synced(
        backend: Backend) -> None:
    """A's segment is on the backend but its sidecar is not (A killed between the two
    uploads: the sidecar removed here stands for that). B, running, loads it from its footer
    once it has been listed without a sidecar for ``backend_timeout + sync_interval``, and
    writes the sidecar; A's delete made before the crash hides the older write too. Before,
    syncs loaded only segments with a sidecar: B never served the blocks (nor could evict the
    segment) until a restart."""
    a = await open_store(backend, node_id="node-a", seal_after=30)
    b = await open_store(backend, node_id="node-b", seal_after=30, backend_timeout=1.0,
                         sync_interval=0.5)
    try:
        await a.create_namespace("kvns")
        await b.recovery_sync()
        await a.put("kvns", b"k", b"v1")
        await a.flush()
        before = {o.key for o in await backend.list_objects("manifests/")}
        await a.put("kvns", b"k", b"v2")
        await a.put("kvns", b"x", b"x1")
        await a.delete("kvns", b"x")
        await a.flush()
        (sidecar,) = {o.key for o in await backend.list_objects("manifests/")} - before
        await backend.delete_objects([sidecar])
        await asyncio.sleep(0.6)  # B's timer may sync meanwhile: the outcome is the same
        await b.recovery_sync()  # the second segment is listed without a sidecar
        # v1, or a miss once A evicted the first segment (dead: docs/operations.md)
        assert await b.get("kvns", b"k") in (None, b"v1")
        await asyncio.sleep(1.6)  # > backend_timeout + sync_interval
        await b.recovery_sync()
        assert await b.get("kvns", b"k") == b"v2"
        assert await b.get("kvns", b"x") is None
        assert sidecar in {o.key for o in await backend.list_objects("manifests/")}
    finally:
        await asyncio.gather(a.close(), b.close())
