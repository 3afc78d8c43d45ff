"""Format version 2: per-entry attributes in the manifest, kept through restarts; version 1
segments (written before attributes existed) still read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from s3kv.backends.base import Backend
from s3kv.backends.file import FileBackend
from s3kv.errors import IntegrityError
from s3kv.store import layout
from s3kv.store.index import BlockIndex, Location
from tests.store.helpers import block, open_store

#: a version 1 segment as the code before format version 2 wrote it: the worked example of
#: docs/format.md (k1 put, k2 put, k1 deleted), rebuilt from its hex dump (CRCs checked)
V1_SEGMENT = Path(__file__).parent / "data" / "v1-01a22be06777-00000001.seg"


def test_manifest_round_trip_with_attributes() -> None:
    entries = [layout.Entry("ns", b"a", 0, 10, 10, 7, 0, 1.5, attrs=b"\x01\x02etag"),
               layout.Entry("ns", b"b", 4096, 3, 3, 9, 0, 2.5),
               layout.Entry("ns", b"a", 0, 0, 0, 0, 0, 3.5, layout.FLAG_TOMBSTONE)]
    m = layout.Manifest("node/seg-1", 4.0, 12345, entries)
    data = m.encode()
    back = layout.Manifest.decode(data)
    assert back.entries == entries
    extra = len(b"\x01\x02etag")
    assert len(data) == (layout.manifest_overhead("node/seg-1") + layout.entry_bytes("ns", b"a")
                         + extra + layout.entry_bytes(None, b"b") + layout.entry_bytes(None, b"a"))
    # version 1 has no room for attributes; without them it is the old format
    with pytest.raises(ValueError):
        m.encode(version=1)
    plain = layout.Manifest("n/s", 1.0, 10, entries[1:])
    assert layout.Manifest.decode(plain.encode(version=1)).entries == entries[1:]


def test_attributes_too_large_and_bad_versions() -> None:
    big = layout.Entry("ns", b"k", 0, 1, 1, 0, 0, 1.0, attrs=b"x" * (layout.MAX_ATTRS_BYTES + 1))
    with pytest.raises(ValueError):
        layout.Manifest("n/s", 1.0, 0, [big]).encode()
    data = bytearray(layout.Manifest("n/s", 1.0, 0, []).encode())
    data[8] = 3  # a future version
    with pytest.raises(IntegrityError):
        layout.Manifest.decode(bytes(data[:-4]) + layout.checksum(data[:-4]).to_bytes(4, "little"))


async def test_version_1_segment_still_reads(tmp_path: Path) -> None:
    """A store whose backend holds a segment of the old format (no sidecar: read through the
    footer) recovers its blocks; new writes beside it are version 2."""
    root = tmp_path / "store"
    seg_dir = root / "segments" / "node-a"
    seg_dir.mkdir(parents=True)
    shutil.copy(V1_SEGMENT, seg_dir / "01a22be06777-00000001.seg")
    (root / "namespaces").mkdir()
    (root / "namespaces" / "kvns.json").write_text(
        '{"name": "kvns", "codec": "none", "created_at": 1796032456.5768657}')
    backend = await FileBackend(root).open()
    store = await open_store(backend)
    try:
        assert await store.get("kvns", b"k2") == b"\xab" * 5000
        assert await store.get("kvns", b"k1") is None  # the tombstone, replayed
        meta = store.head("kvns", b"k2")
        assert meta is not None and meta.attrs == b""
        await store.put("kvns", b"k3", b"new", attrs=b"\x01\x03abc")
        await store.flush()
    finally:
        await store.close()
        await backend.close()
    segments = list((root / "segments").rglob("*.seg"))
    versions = sorted(layout.TRAILER.unpack(p.read_bytes()[-32:])[1] for p in segments)
    assert versions == [1, 2]


async def test_attributes_survive_restart(backend: Backend) -> None:
    store = await open_store(backend, node_id="attrs")
    data = block(1, 50_000)
    try:
        await store.create_namespace("attrs")
        await store.put("attrs", b"with", data, attrs=b"\x01\x20" + b"e" * 32)
        await store.put("attrs", b"without", b"plain")
        await store.put("attrs", b"changed", b"v1", attrs=b"one")
        await store.put("attrs", b"changed", b"v2", attrs=b"second")
        await store.flush()
    finally:
        await store.close()
    again = await open_store(backend, node_id="attrs2")
    try:
        meta = again.head("attrs", b"with")
        assert meta is not None and meta.attrs == b"\x01\x20" + b"e" * 32
        assert await again.get("attrs", b"with") == data
        plain = again.head("attrs", b"without")
        assert plain is not None and plain.attrs == b""
        changed = again.head("attrs", b"changed")
        assert changed is not None and changed.attrs == b"second"
        assert [m.attrs for m in (await again.list_blocks("attrs"))[0]] == [b"second",
                                                                 b"\x01\x20" + b"e" * 32, b""]
    finally:
        await again.close()


def test_index_keeps_attributes_through_replace_remove_and_compaction() -> None:
    idx = BlockIndex()
    loc = Location(1, 0, 10, 10, 5, 0, 1.0, b"attrs-0")
    for i in range(3000):
        idx.put(1, f"key-{i:05d}".encode(), Location(1, i, 10, 10, 5, 0, 1.0,
                                                     f"attrs-{i}".encode() * (i % 3)))
    idx.put(1, b"key-00000", loc)
    assert idx.get(1, b"key-00000") == loc
    idx.put(1, b"key-00001", Location(1, 1, 10, 10, 5, 0, 2.0))  # attributes dropped
    got = idx.get(1, b"key-00001")
    assert got is not None and got.attrs == b""
    for i in range(2, 2900):  # enough garbage to compact the arena
        idx.remove(1, f"key-{i:05d}".encode())
    for i in range(2900, 3000):
        got = idx.get(1, f"key-{i:05d}".encode())
        assert got is not None and got.attrs == f"attrs-{i}".encode() * (i % 3)
    assert idx.get(1, b"key-00000") == loc
