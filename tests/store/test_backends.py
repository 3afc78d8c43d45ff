"""One contract suite for every backend: the same calls behave the same on S3 and on files."""

from __future__ import annotations

import asyncio
import os

import pytest

from s3kv.backends import Backend, parse_s3_url
from s3kv.backends.multipart import MultipartUpload
from s3kv.errors import BackendError, ConfigError, ObjectMissing
from s3kv.retry import RetryPolicy
from s3kv.sizes import MiB


async def test_put_get_range_head_list_delete(backend: Backend) -> None:
    data = os.urandom(100_000)
    await backend.put_object("a/b/obj1", data)
    await backend.put_object("a/c/obj2", b"xyz")
    assert await backend.get_object("a/b/obj1") == data
    assert await backend.get_range("a/b/obj1", 10, 20) == data[10:30]
    assert await backend.get_range("a/b/obj1", 99_990, 50) == data[99_990:]
    assert await backend.head_object("a/b/obj1") == len(data)
    listed = await backend.list_objects("a/")
    assert [o.key for o in listed] == ["a/b/obj1", "a/c/obj2"]
    assert [o.size for o in listed] == [len(data), 3]
    assert [o.key for o in await backend.list_objects("a/b")] == ["a/b/obj1"]
    await backend.delete_objects(["a/b/obj1", "does/not/exist"])
    with pytest.raises(ObjectMissing):
        await backend.get_object("a/b/obj1")
    with pytest.raises(ObjectMissing):
        await backend.head_object("a/b/obj1")
    assert [o.key for o in await backend.list_objects("a/")] == ["a/c/obj2"]


async def test_multipart_round_trip(backend: Backend) -> None:
    part = 5 * MiB
    chunks = [os.urandom(part), os.urandom(part), os.urandom(1234)]
    up = MultipartUpload(backend, "seg/one", part, RetryPolicy(), asyncio.Semaphore(2))
    await up.start()
    for c in chunks:
        await up.add_part(c)
    assert [u.key for u in await backend.list_multipart_uploads("seg/")] == ["seg/one"]
    await up.complete()
    whole = b"".join(chunks)
    assert await backend.head_object("seg/one") == len(whole)
    assert await backend.get_range("seg/one", part - 10, 20) == whole[part - 10:part + 10]
    assert await backend.get_object("seg/one") == whole
    assert await backend.list_multipart_uploads("seg/") == []


async def test_multipart_abort_leaves_nothing(backend: Backend) -> None:
    up = MultipartUpload(backend, "seg/two", 5 * MiB, RetryPolicy(), asyncio.Semaphore(2))
    await up.start()
    await up.add_part(os.urandom(5 * MiB))
    await asyncio.sleep(0)
    await up.abort()
    assert await backend.list_multipart_uploads("seg/") == []
    with pytest.raises(ObjectMissing):
        await backend.head_object("seg/two")


async def test_multipart_failure_aborts(backend: Backend) -> None:
    """A part that fails makes complete() raise, and the upload is aborted, not left behind."""
    up = MultipartUpload(backend, "seg/three", 5 * MiB, RetryPolicy(attempts=1),
                         asyncio.Semaphore(2))
    await up.start()
    await up.add_part(os.urandom(5 * MiB))
    await backend.abort_multipart("seg/three", up.upload_id or "")  # pull the rug
    with pytest.raises(BackendError):  # the next part, or at the latest complete(), fails
        await up.add_part(os.urandom(5 * MiB))
        await up.complete()
    await up.abort()  # what a caller does when add_part fails; complete() does it itself
    assert await backend.list_multipart_uploads("seg/") == []
    with pytest.raises(ObjectMissing):
        await backend.head_object("seg/three")


async def test_check(backend: Backend) -> None:
    await backend.check()


def test_parse_s3_url() -> None:
    loc = parse_s3_url("s3://kv/cache/a?endpoint=http://h1:9000,http://h2:9000")
    assert loc.bucket == "kv"
    assert loc.prefix == "cache/a/"
    assert loc.endpoints == ("http://h1:9000", "http://h2:9000")
    with pytest.raises(ConfigError, match="endpoint"):
        parse_s3_url("s3://kv/x?endpoint=ftp://h")
    with pytest.raises(ConfigError):
        parse_s3_url("http://kv/x")
