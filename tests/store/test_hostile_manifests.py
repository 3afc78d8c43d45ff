"""Manifests whose checksums match but whose fields do not describe the object they sit
beside (another tool wrote them, a copy under another name, an object truncated or extended
since): a start takes the segment's footer instead, or skips the segment with a warning; it
never indexes a block it cannot read back as it was written, and never fails to start."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from s3kv.backends.base import Backend
from s3kv.store import layout
from s3kv.store.segments import segment_key, sidecar_key
from tests.store.helpers import open_store, segments_on_backend

A, B = b"A" * 5000, b"B" * 7000


async def one_segment(backend: Backend) -> tuple[str, int]:
    """A store's segment holding ``a`` and ``b``, on the backend; its name and size."""
    store = await open_store(backend)
    try:
        await store.create_namespace("kvns")
        await store.put("kvns", b"a", A)
        await store.put("kvns", b"b", B)
        await store.flush()
    finally:
        await store.close()
    ((name, size),) = (await segments_on_backend(backend)).items()
    return name, size


def raw_length(m: layout.Manifest, size: int) -> None:
    m.entries[0] = m.entries[0]._replace(raw_length=len(A) + 100)


def past_the_end(m: layout.Manifest, size: int) -> None:
    m.entries[1] = m.entries[1]._replace(offset=size + 4096)


def past_four_gib(m: layout.Manifest, size: int) -> None:
    m.entries[1] = m.entries[1]._replace(offset=1 << 40)


def into_the_manifest(m: layout.Manifest, size: int) -> None:
    m.entries[1] = m.entries[1]._replace(offset=size - 132, length=100)


def other_name(m: layout.Manifest, size: int) -> None:
    m.segment = "other/000000000001-00000001"


def other_length(m: layout.Manifest, size: int) -> None:
    m.segment_length = 1 << 50


def stamped_in_33658(m: layout.Manifest, size: int) -> None:
    m.entries[0] = m.entries[0]._replace(written_at=1e12)


def sealed_at_nan(m: layout.Manifest, size: int) -> None:
    m.created_at = float("nan")


@pytest.mark.parametrize("lie", [raw_length, past_the_end, past_four_gib, into_the_manifest,
                                 other_name, other_length, stamped_in_33658, sealed_at_nan])
async def test_a_sidecar_that_lies_gives_way_to_the_footer(
        backend: Backend, lie: Callable[[layout.Manifest, int], None]) -> None:
    """Before: the sidecar's entries were indexed as they were: ``raw_length`` made a block of
    5000 bytes head as 5100 (an S3 GET declared 5100 and sent 5000), ``past_four_gib`` failed
    the start (OverflowError from the index's 32-bit offsets), ``other_name`` indexed the
    blocks in a segment that is not there (misses), ``other_length`` counted 1 PiB against the
    capacity, ``stamped_in_33658`` a stamp no HTTP date holds (S3 GETs answered 500); the
    others were misses. Now the sidecar is bad (a warning), the footer is read
    and written as the sidecar again: both blocks come back as written."""
    name, size = await one_segment(backend)
    manifest = layout.Manifest.decode(await backend.get_object(sidecar_key("", name)))
    lie(manifest, size)
    await backend.put_object(sidecar_key("", name), manifest.encode())
    with capture_logs() as logs:
        store = await open_store(backend)
    try:
        assert [e["event"] for e in logs if e["log_level"] in ("warning", "error")] == \
            ["manifest.sidecar_bad"]
        for key, data in ((b"a", A), (b"b", B)):
            meta = store.head("kvns", key)
            assert meta is not None and meta.size == len(data)
            assert await store.get("kvns", key) == data
        assert store.segments.get(store.index.get(store.ns_id("kvns"), b"a").segment).length \
            == size  # type: ignore[union-attr]
    finally:
        await store.close()
    again = layout.Manifest.decode(await backend.get_object(sidecar_key("", name)))
    layout.check_manifest(again, name, size, len(manifest.encode()))  # the footer's again


@pytest.mark.parametrize("change", ["truncated", "extended"])
async def test_a_segment_cut_short_or_extended_is_skipped(backend: Backend,
                                                          change: str) -> None:
    """Before: the sidecar indexed every block of a segment cut to 6000 bytes (the second a
    miss at each read) or of one with bytes after its trailer (its length counted wrong). Now
    the object is not the one the manifests describe: skipped with a warning and an error,
    the store starts and serves nothing of it."""
    name, _ = await one_segment(backend)
    data = await backend.get_object(segment_key("", name))
    await backend.put_object(segment_key("", name),
                             data[:6000] if change == "truncated" else data + b"junk" * 100)
    with capture_logs() as logs:
        store = await open_store(backend)
    try:
        events = [e["event"] for e in logs if e["log_level"] in ("warning", "error")]
        assert events == ["manifest.sidecar_bad", "manifest.unreadable"]
        assert store.head("kvns", b"a") is None and store.head("kvns", b"b") is None
        assert await store.get("kvns", b"a") is None
    finally:
        await store.close()


@pytest.mark.parametrize("where", ["earlier", "4GiB"])
async def test_a_trailer_that_places_the_manifest_elsewhere_is_unreadable(
        backend: Backend, where: str) -> None:
    """Without a sidecar, a trailer (checksums right) whose manifest does not end where the
    trailer starts is refused before its range is read: before, the range was read (for a
    length of 4 GiB from 0: the whole object, whatever its size) and found wrong only by its
    checksum."""
    name, _ = await one_segment(backend)
    data = bytearray(await backend.get_object(segment_key("", name)))
    moff, mlen, _ = layout.decode_trailer(bytes(data[-layout.TRAILER_SIZE:]))
    body = bytes(data[moff:moff + mlen])
    trailer = layout.encode_trailer(moff - 4096, body)
    if where == "4GiB":  # the manifest's length field, the trailer's checksum made right
        head = layout.TRAILER.pack(layout.TRAILER_MAGIC, 2, 0, 0xFFFFFFFF, 0,
                                   layout.checksum(body), 0)[:-4]
        trailer = head + layout.checksum(head).to_bytes(4, "little")
    data[-layout.TRAILER_SIZE:] = trailer
    await backend.put_object(segment_key("", name), bytes(data))
    await backend.delete_objects([sidecar_key("", name)])
    with capture_logs() as logs:
        store = await open_store(backend)
    try:
        bad = [e for e in logs if e["event"] == "manifest.unreadable"]
        assert len(bad) == 1 and "trailer puts the manifest" in bad[0]["error"]
        assert store.head("kvns", b"a") is None
    finally:
        await store.close()
