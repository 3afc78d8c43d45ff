"""The S3 object attribute encoding (what the manifest carries for the front), precondition
evaluation order, and the per-key locks, in process (the HTTP behaviour is tested against a
running gateway in test_s3_semantics.py)."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from s3kv.errors import RequestError
from s3kv.gateway.conditions import NOT_MODIFIED, KeyLocks, check_read, check_write
from s3kv.gateway.objattrs import (
    CONTENT_HEADERS,
    Checksum,
    ObjectAttrs,
    from_request,
    object_etag,
    response_headers,
)
from s3kv.store.store import BlockMeta
from s3kv.wire.headers import index_headers

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@given(etag=st.text("0123456789abcdef-", max_size=40),
       headers=st.lists(st.tuples(st.sampled_from(CONTENT_HEADERS), _text), max_size=6,
                        unique_by=lambda h: h[0]),
       meta=st.lists(st.tuples(st.text("abcdefgh-_", min_size=1, max_size=10),
                               _text.filter(lambda t: "\0" not in t)), max_size=5),
       parts=st.lists(st.integers(0, 2**32 - 1), max_size=20),
       checksum=st.none() | st.builds(Checksum, st.sampled_from(["crc32", "sha256"]),
                                      st.text("ABCabc+/=-0123", max_size=50),
                                      st.sampled_from(["FULL_OBJECT", "COMPOSITE"])))
def test_attributes_round_trip(etag: str, headers: list[tuple[str, str]],
                               meta: list[tuple[str, str]], parts: list[int],
                               checksum: Checksum | None) -> None:
    attrs = ObjectAttrs(etag, tuple(headers), tuple(meta), checksum, tuple(parts))
    assert ObjectAttrs.decode(attrs.encode()) == attrs


def test_unknown_fields_are_skipped_and_truncation_is_safe() -> None:
    attrs = ObjectAttrs("abc", (("Content-Type", "text/plain"),))
    data = attrs.encode()
    future = struct.pack("<BH", 0x7F, 3) + b"new"
    assert ObjectAttrs.decode(future + data) == attrs
    for cut in range(len(data)):
        ObjectAttrs.decode(data[:cut])  # never raises


def test_request_headers_metadata_limit_and_overrides() -> None:
    # as aiohttp hands them over
    got = from_request(index_headers(CIMultiDict({"Content-Type": "text/csv",
                                                "Content-Encoding": "aws-chunked,gzip",
                                                "x-amz-meta-Model": "m", "X-Amz-Meta-b": "2",
                                                "Expect": "100-continue"})))
    assert dict(got.headers) == {"Content-Type": "text/csv", "Content-Encoding": "gzip"}
    assert got.meta == (("b", "2"), ("model", "m"))
    from_request(index_headers({"x-amz-meta-a": "v" * 2047}))  # 1 + 2047 bytes: at the limit
    with pytest.raises(RequestError) as exc:
        from_request(index_headers({"x-amz-meta-a": "v" * 2048}))
    assert exc.value.code == "MetadataTooLarge"

    meta = BlockMeta(b"k", 5, 0x1234, 1_700_000_000.5, 0, got.encode())
    out = response_headers(meta, got, {"response-content-type": "text/plain"}, checksum=False)
    assert out["Content-Type"] == "text/plain" and out["x-amz-meta-model"] == "m"
    assert out["Last-Modified"] == "Tue, 14 Nov 2023 22:13:20 GMT"
    assert object_etag(meta) == f'"{0x1234:08x}5"'  # no stored ETag: the fast form


def test_precondition_order() -> None:
    etag, t = '"e1"', 1_700_000_000.0
    old, new = "Mon, 13 Nov 2023 00:00:00 GMT", "Wed, 15 Nov 2023 00:00:00 GMT"
    assert check_read({}, etag, t) is None
    assert check_read({"If-Match": '"x", "e1"'}, etag, t) is None
    assert check_read({"If-Match": "*"}, etag, t) is None
    assert check_read({"If-Match": etag, "If-Unmodified-Since": old}, etag, t) is None
    with pytest.raises(RequestError):
        check_read({"If-Unmodified-Since": old}, etag, t)
    assert check_read({"If-None-Match": "W/\"e1\""}, etag, t) == NOT_MODIFIED
    assert check_read({"If-None-Match": '"x"', "If-Modified-Since": new}, etag, t) is None
    assert check_read({"If-Modified-Since": new}, etag, t) == NOT_MODIFIED
    assert check_read({"If-Modified-Since": "not a date"}, etag, t) is None
    check_write({"If-None-Match": "*"}, None)
    with pytest.raises(RequestError):
        check_write({"If-None-Match": "*"}, etag)
    with pytest.raises(RequestError):
        check_write({"If-Match": etag}, None)
    with pytest.raises(RequestError) as exc:
        check_write({"If-None-Match": etag}, etag)
    assert exc.value.status == 501


async def test_key_locks_serialise_and_forget() -> None:
    locks = KeyLocks()
    order: list[str] = []

    async def hold(name: str, key: bytes) -> None:
        async with locks.hold("b", key):
            order.append(f"{name}+")
            await asyncio.sleep(0.01)
            order.append(f"{name}-")

    await asyncio.gather(hold("a", b"k"), hold("b", b"k"), hold("c", b"other"))
    assert order.index("a-") < order.index("b+")  # same key: one at a time
    assert order.index("c+") < order.index("a-")  # another key: not held up
    assert len(locks) == 0


async def test_key_locks_forget_a_waiter_that_is_cancelled() -> None:
    locks = KeyLocks()
    held = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold("b", b"k"):
            held.set()
            await release.wait()

    async def waiter() -> None:
        async with locks.hold("b", b"k"):
            pytest.fail("entered while the key was held")

    first = asyncio.create_task(holder())
    await held.wait()
    second = asyncio.create_task(waiter())
    await asyncio.sleep(0.01)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert len(locks) == 1  # the holder only
    release.set()
    await first
    assert len(locks) == 0
    with pytest.raises(ValueError):  # an error inside: the lock is released and forgotten
        async with locks.hold("b", b"k"):
            raise ValueError
    assert len(locks) == 0


def test_attrs_and_dates_remembered_are_the_same() -> None:
    from email.utils import formatdate

    from s3kv.gateway.objattrs import attrs_of, http_date

    for attrs in (ObjectAttrs(etag="e", headers=(("Content-Type", "text/plain"),)),
                  ObjectAttrs(meta=(("big", "v" * 2000),))):  # over the remembered size
        blob = attrs.encode()
        meta = BlockMeta(b"k", 1, 0, 1700000000.5, 0, blob)
        assert attrs_of(meta) == attrs_of(meta) == ObjectAttrs.decode(blob) == attrs
    assert attrs_of(BlockMeta(b"k", 1, 0, 0.0, 0, b"")) == ObjectAttrs()
    for t in (0, 1700000000, 1700000001):
        assert http_date(t) == http_date(t) == formatdate(t, usegmt=True)
