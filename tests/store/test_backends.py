"""One contract suite for every backend: the same calls behave the same on S3 and on files."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from s3kv.backends import Backend, S3Backend, S3Location, parse_s3_url
from s3kv.backends.multipart import MultipartUpload
from s3kv.errors import BackendError, ConfigError, ObjectMissing
from s3kv.retry import RetryPolicy
from s3kv.sizes import MiB
from tests.conftest import S3_SERVERS, s3_server_for


async def test_put_get_range_head_list_delete(any_backend: Backend) -> None:
    data = os.urandom(100_000)
    await any_backend.put_object("a/b/obj1", data)
    await any_backend.put_object("a/c/obj2", b"xyz")
    assert await any_backend.get_object("a/b/obj1") == data
    assert await any_backend.get_range("a/b/obj1", 10, 20) == data[10:30]
    assert await any_backend.get_range("a/b/obj1", 99_990, 50) == data[99_990:]
    assert await any_backend.head_object("a/b/obj1") == len(data)
    listed = await any_backend.list_objects("a/")
    assert [o.key for o in listed] == ["a/b/obj1", "a/c/obj2"]
    assert [o.size for o in listed] == [len(data), 3]
    assert [o.key for o in await any_backend.list_objects("a/b")] == ["a/b/obj1"]
    await any_backend.delete_objects(["a/b/obj1", "does/not/exist"])
    with pytest.raises(ObjectMissing):
        await any_backend.get_object("a/b/obj1")
    with pytest.raises(ObjectMissing):
        await any_backend.head_object("a/b/obj1")
    assert [o.key for o in await any_backend.list_objects("a/")] == ["a/c/obj2"]


async def test_multipart_round_trip(any_backend: Backend) -> None:
    part = 5 * MiB
    chunks = [os.urandom(part), os.urandom(part), os.urandom(1234)]
    up = MultipartUpload(any_backend, "seg/one", part, RetryPolicy(), asyncio.Semaphore(2))
    await up.start()
    for c in chunks:
        await up.add_part(c)
    assert [u.key for u in await any_backend.list_multipart_uploads("seg/")] == ["seg/one"]
    await up.complete()
    whole = b"".join(chunks)
    assert await any_backend.head_object("seg/one") == len(whole)
    assert await any_backend.get_range("seg/one", part - 10, 20) == whole[part - 10:part + 10]
    assert await any_backend.get_object("seg/one") == whole
    assert await any_backend.list_multipart_uploads("seg/") == []


async def test_multipart_abort_leaves_nothing(any_backend: Backend) -> None:
    up = MultipartUpload(any_backend, "seg/two", 5 * MiB, RetryPolicy(), asyncio.Semaphore(2))
    await up.start()
    await up.add_part(os.urandom(5 * MiB))
    await asyncio.sleep(0)
    await up.abort()
    assert await any_backend.list_multipart_uploads("seg/") == []
    with pytest.raises(ObjectMissing):
        await any_backend.head_object("seg/two")


async def test_multipart_abort_is_sent_once(any_backend: Backend,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer aborts again after a complete() that failed and aborted: one abort reaches
    the server (the RGW restart test logged two per failed segment)."""
    sent: list[str] = []
    abort = any_backend.abort_multipart

    async def counted(key: str, upload_id: str) -> None:
        sent.append(upload_id)
        await abort(key, upload_id)

    monkeypatch.setattr(any_backend, "abort_multipart", counted)
    up = MultipartUpload(any_backend, "seg/once", 5 * MiB, RetryPolicy(), asyncio.Semaphore(2))
    await up.start()
    await up.add_part(os.urandom(5 * MiB))
    await up.abort()
    await up.abort()
    assert sent == [up.upload_id]
    assert await any_backend.list_multipart_uploads("seg/") == []


async def test_multipart_failure_aborts(any_backend: Backend) -> None:
    """A part that fails makes complete() raise, and the upload is aborted, not left behind."""
    up = MultipartUpload(any_backend, "seg/three", 5 * MiB, RetryPolicy(attempts=1),
                         asyncio.Semaphore(2))
    await up.start()
    await up.add_part(os.urandom(5 * MiB))
    await any_backend.abort_multipart("seg/three", up.upload_id or "")  # pull the rug
    with pytest.raises(BackendError):  # the next part, or at the latest complete(), fails
        await up.add_part(os.urandom(5 * MiB))
        await up.complete()
    await up.abort()  # what a caller does when add_part fails; complete() does it itself
    assert await any_backend.list_multipart_uploads("seg/") == []
    with pytest.raises(ObjectMissing):
        await any_backend.head_object("seg/three")


async def test_check(any_backend: Backend) -> None:
    await any_backend.check()


async def test_get_range_errors(any_backend: Backend) -> None:
    """A missing object is ObjectMissing (a miss), on every backend and read path."""
    with pytest.raises(ObjectMissing):
        await any_backend.get_range("no/such/object", 0, 10)
    await any_backend.put_object("small", b"0123456789")
    assert await any_backend.get_range("small", 4, 100) == b"456789"  # short at the end


@pytest.mark.parametrize("server_kind", S3_SERVERS)
async def test_s3_ranged_reads_without_botocore(request: pytest.FixtureRequest,
                                                server_kind: str) -> None:
    """The S3 backend's fast ranged GETs (no botocore) read what botocore reads, and translate
    errors the same way: a missing bucket is a BackendError, not a miss. Credentials come
    from botocore's chain."""
    endpoint = s3_server_for(request, server_kind).endpoint
    bucket = f"ranged-{uuid.uuid4().hex[:12]}"
    fast = await S3Backend(S3Location(bucket, "", (endpoint,))).open()
    slow = await S3Backend(S3Location(bucket, "", (endpoint,)), fast_reads=False).open()
    gone = await S3Backend(S3Location("no-such-bucket-here", "", (endpoint,))).open()
    assert fast._ranged is not None and slow._ranged is None  # the path under test is taken
    try:
        await fast.ensure_bucket()
        data = os.urandom(3 * MiB + 17)
        await fast.put_object("obj", data)
        for start, length in ((0, 1), (5, 4096), (MiB - 3, 2 * MiB), (3 * MiB, 100)):
            got = await fast.get_range("obj", start, length)
            assert got == await slow.get_range("obj", start, length)
            assert got == data[start:start + length]
        with pytest.raises(ObjectMissing):
            await fast.get_range("missing", 0, 10)
        with pytest.raises(BackendError) as err:
            await gone.get_range("obj", 0, 10)
        assert not isinstance(err.value, ObjectMissing) and not err.value.transient
    finally:
        for b in (fast, slow, gone):
            await b.close()


def test_parse_s3_url() -> None:
    loc = parse_s3_url("s3://kv/cache/a?endpoint=http://h1:9000,http://h2:9000")
    assert loc.bucket == "kv"
    assert loc.prefix == "cache/a/"
    assert loc.endpoints == ("http://h1:9000", "http://h2:9000")
    with pytest.raises(ConfigError, match="endpoint"):
        parse_s3_url("s3://kv/x?endpoint=ftp://h")
    for bad in ("http://h:99999", "http://[::1:1", "http://h:0", "http://"):
        # was taken, and failed at the gateway's first backend request (or a ValueError)
        with pytest.raises(ConfigError, match="is not http"):
            parse_s3_url(f"s3://kv/x?endpoint={bad}")
    with pytest.raises(ConfigError):
        parse_s3_url("http://kv/x")
