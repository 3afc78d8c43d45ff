"""The catalog's namespaces: ids that fit the index's 16-bit field, a clear refusal when all
are taken (s3kv/store/catalog.py), and a deleted one that stays deleted across a restart
(s3kv/store/recovery.py, s3kv/store/namespaces.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3kv.config import Settings
from s3kv.errors import TooManyNamespaces
from s3kv.store.catalog import Catalog
from s3kv.store.codecs import CodecSpec
from s3kv.store.index import MAX_NAMESPACE_ID, Location
from s3kv.store.store import BlockStore

LOC = Location(1, 0, 1, 1, 0, 0, 0.0)


def test_every_namespace_id_fits_the_index_and_the_last_one_past_is_refused() -> None:
    """Before, the 65,536th namespace got an id the index could not store: every write into
    it failed with an OverflowError (a 500)."""
    cat = Catalog()
    for i in range(MAX_NAMESPACE_ID):
        cat.register_namespace(f"ns-{i}")
    last = cat.ns_id(f"ns-{MAX_NAMESPACE_ID - 1}")
    assert last == MAX_NAMESPACE_ID
    cat.put(last, b"k", LOC)
    assert cat.index.get(last, b"k") == LOC
    with pytest.raises(TooManyNamespaces) as refused:
        cat.register_namespace("one-more")
    assert refused.value.code == "TooManyBuckets" and "delete one" in str(refused.value)
    assert "one-more" not in cat.namespaces
    # a namespace dropped (empty) gives its id to the next one
    dropped = cat.drop_namespace("ns-7")
    assert cat.register_namespace("one-more") == dropped
    cat.put(dropped, b"k", LOC)
    assert cat.index.get(dropped, b"k") == LOC


async def test_a_deleted_namespace_stays_deleted_after_a_restart(tmp_path: Path) -> None:
    """Its blocks' entries (a put, then the delete's tombstone) stay in sealed segments; before,
    replaying them registered the namespace again: a bucket deleted came back on restart, and
    could not be created anew (BucketAlreadyOwnedByYou)."""
    settings = Settings.load({"store": f"file://{tmp_path}", "sync_interval": 0,
                              "node_id": "n1"})
    store = await BlockStore.open(settings)
    try:
        for name in ("gone", "kept"):
            await store.create_namespace(name)
            await store.put(name, b"k", b"x" * 100)
        await store.flush()
        await store.delete("gone", b"k")
        await store.flush()
        await store.delete_namespace("gone")
    finally:
        await store.close()
    again = await BlockStore.open(settings)
    try:
        assert again.list_namespaces() == ["kept"]
        assert await again.get("kept", b"k") == b"x" * 100
        await again.create_namespace("gone")
        assert again.list_namespaces() == ["gone", "kept"]
    finally:
        await again.close()


async def test_replicas_learn_the_namespaces_others_create(tmp_path: Path) -> None:
    """Two gateways on one bucket: an empty namespace created through one, with its codec, is
    known to the other after its next sync; before, the other never knew an empty one (S3
    clients it served got NoSuchBucket) and learnt a written one from its blocks' entries, with
    the default codec. One deleted through the first is gone from the other after its next
    sync (test_namespace_deletion.py has the rest)."""
    def settings(node: str) -> Settings:
        return Settings.load({"store": f"file://{tmp_path}", "sync_interval": 0,
                              "node_id": node})

    a = await BlockStore.open(settings("a"))
    b = await BlockStore.open(settings("b"))
    try:
        await a.create_namespace("shared", "zstd:level=1")
        await b.create_namespace("local")
        assert await b.recovery_sync() == 0
        assert b.list_namespaces() == ["local", "shared"]
        assert b.namespace_codecs["shared"] == a.namespace_codecs["shared"] != CodecSpec()
        await b.put("shared", b"k", b"v" * 64)
        assert b.namespace_codecs["shared"] == a.namespace_codecs["shared"]
        await b.delete("shared", b"k")
        await a.delete_namespace("shared")
        await b.recovery_sync()
        assert b.list_namespaces() == ["local"]
        await a.recovery_sync()
        assert a.list_namespaces() == ["local"]
    finally:
        await a.close()
        await b.close()
