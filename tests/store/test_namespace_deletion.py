"""A namespace (bucket) deleted through one replica is deleted on every replica and at every
start (s3kv/store/namespaces.py): the other replicas drop it at their next sync, with the
blocks they had taken into it, and no restart brings it back. Before, the others kept serving
it and taking writes into it until they restarted, and those writes brought it back on every
replica's next start. Each scenario runs on moto, a directory, and Ceph RGW with ``--rgw``
(``any_backend``), two stores on one backend standing for two gateways."""

from __future__ import annotations

import pytest

from s3kv.backends.base import Backend
from s3kv.errors import NamespaceNotFound
from s3kv.sizes import KiB
from s3kv.store.namespaces import MARKERS, RECORDS
from s3kv.store.store import BlockStore
from tests.store.helpers import block, open_store

NS = "shared"


async def _replica(backend: Backend, node: str) -> BlockStore:
    return await open_store(backend, node_id=node, seal_after=30)


async def test_a_bucket_deleted_through_one_replica_is_gone_on_the_others_for_good(
        any_backend: Backend) -> None:
    a = await _replica(any_backend, "a")
    b = await _replica(any_backend, "b")
    try:
        await a.create_namespace(NS)
        await a.create_namespace("kept")
        await b.recovery_sync()
        await b.put(NS, b"k", block(1, 64 * KiB))  # in B's open segment: A sees NS empty
        kept = block(2, 64 * KiB)
        await b.put("kept", b"k", kept)
        await a.delete_namespace(NS)
        await b.recovery_sync()
        assert b.list_namespaces() == ["kept"]
        with pytest.raises(NamespaceNotFound):
            await b.put(NS, b"later", block(3, KiB))
        with pytest.raises(NamespaceNotFound):
            await b.get(NS, b"k")
        await b.flush()  # B's segment, with NS/k in its manifest, on the backend
    finally:
        await a.close()
        await b.close()
    again = await _replica(any_backend, "c")
    try:
        assert again.list_namespaces() == ["kept"]
        assert await again.get("kept", b"k") == kept
        await again.create_namespace(NS)  # anew: empty
        assert await again.get(NS, b"k") is None
    finally:
        await again.close()


async def test_a_name_created_anew_starts_empty_on_every_replica(any_backend: Backend) -> None:
    a = await _replica(any_backend, "a")
    b = await _replica(any_backend, "b")
    try:
        await a.create_namespace(NS)
        await b.recovery_sync()
        await b.put(NS, b"old", block(1, 64 * KiB))
        await b.flush()  # sealed; A has not synced, so NS is empty to A
        await a.delete_namespace(NS)
        await b.put(NS, b"raced", block(3, 64 * KiB))  # B has not learnt of the deletion
        await b.flush()
        await a.create_namespace(NS, "zstd:level=1")
        await a.put(NS, b"new", block(2, 64 * KiB))
        await a.flush()
        await b.recovery_sync()
        assert b.list_namespaces() == [NS]
        assert b.namespace_codecs[NS] == a.namespace_codecs[NS]
        assert await b.get(NS, b"old") is None and await b.get(NS, b"raced") is None
        assert await b.get(NS, b"new") == await a.get(NS, b"new")
    finally:
        await a.close()
        await b.close()
    again = await _replica(any_backend, "c")
    try:
        assert again.list_namespaces() == [NS]
        assert await again.get(NS, b"old") is None and await again.get(NS, b"raced") is None
        assert [m.key for m in (await again.list_blocks(NS))[0]] == [b"new"]  # type: ignore[union-attr]
    finally:
        await again.close()


async def test_a_deletion_cut_short_after_its_marker_is_a_deletion(any_backend: Backend) -> None:
    """The marker goes first; a crash before the record is removed leaves both on the backend,
    and the marker, newer, wins. Deleting again leaves one marker per name."""
    store = await _replica(any_backend, "a")
    try:
        await store.create_namespace(NS)
        record = await any_backend.get_object(f"{RECORDS}{NS}.json")
        await store.delete_namespace(NS)
        await any_backend.put_object(f"{RECORDS}{NS}.json", record)  # as if never removed
    finally:
        await store.close()
    store = await _replica(any_backend, "a")
    try:
        assert store.list_namespaces() == []
        await store.create_namespace(NS)
        await store.put(NS, b"k", block(1, KiB))
        await store.delete(NS, b"k")
        await store.delete_namespace(NS)
        markers = await any_backend.list_objects(f"{MARKERS}{NS}/")
        assert len(markers) == 1
    finally:
        await store.close()


async def test_a_record_that_merely_went_missing_deletes_nothing(any_backend: Backend) -> None:
    """A backend that lost its data loses its records too: without a marker, a replica keeps
    serving the namespace it knows (docs/reliability.md)."""
    a = await _replica(any_backend, "a")
    b = await _replica(any_backend, "b")
    try:
        await a.create_namespace(NS)
        await b.recovery_sync()
        await any_backend.delete_objects([f"{RECORDS}{NS}.json"])
        await b.recovery_sync()
        assert b.list_namespaces() == [NS]
        data = block(1, KiB)
        await b.put(NS, b"k", data)
        assert await b.get(NS, b"k") == data
    finally:
        await a.close()
        await b.close()


async def test_a_write_taken_after_the_name_was_created_anew_counts_on_every_replica(
        any_backend: Backend) -> None:
    """A deletes the namespace and creates it anew; B, which has learnt of neither, takes a
    write before (``raced``) and one after the creation (``late``, stamped after it). Every
    replica and every start keeps the entries stamped after the creation (docs/format.md):
    ``late`` is in the new namespace on A, on B once it synced, and after a start; ``raced``
    nowhere. Before, B's sync dropped ``late`` with the old namespace while A and every start
    served it."""
    a = await _replica(any_backend, "a")
    b = await _replica(any_backend, "b")
    try:
        await a.create_namespace(NS)
        await b.recovery_sync()
        await b.put(NS, b"raced", block(1, 4 * KiB))
        await a.delete_namespace(NS)
        await a.create_namespace(NS)
        late = block(2, 4 * KiB)
        await b.put(NS, b"late", late)
        await b.flush()
        await b.recovery_sync()
        await a.recovery_sync()
        for replica in (a, b):
            assert await replica.get(NS, b"late") == late
            assert await replica.get(NS, b"raced") is None
    finally:
        await a.close()
        await b.close()
    again = await _replica(any_backend, "c")
    try:
        assert [m.key for m in (await again.list_blocks(NS))[0]] == [b"late"]  # type: ignore[union-attr]
    finally:
        await again.close()
