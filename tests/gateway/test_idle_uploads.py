"""Multipart uploads left idle give their staged parts back when the memory budget is short
(s3kv/gateway/uploads.py, ``Uploads.reclaim``).

A client that dies between its parts and its Complete (a crashed or preempted pod) used to hold
its parts' memory for an hour, every write meanwhile answered with 503 SlowDown once such
uploads filled the budget. Now a write that does not fit first drops uploads idle for
``UPLOAD_GRACE`` seconds, the longest idle first; an upload with a part arriving is never idle;
a dropped upload's Complete gets NoSuchUpload.

Real parts, in process (so that the grace can be made short): the gateway's front on a file://
store, listening on a loopback socket, raw HTTP/1.1 requests as the client (no credentials:
anonymous on loopback)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import s3kv.gateway.uploads as uploads
from s3kv.config import MiB, Settings
from tests.support.localapp import front_on

NS = "idle-uploads"
#: long enough that two part uploads and a PUT fit in it on a loaded machine (at 0.3 s the
#: first test's uploads went idle before its first PUT under a load average of ~14)
GRACE = 1.5
PART = 10 * MiB  # two parts staged fill most of the budget
BUDGET = 24 * MiB


@pytest.fixture
async def port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    monkeypatch.setattr(uploads, "UPLOAD_GRACE", GRACE)
    settings = Settings.load({"store": f"file://{tmp_path}/store", "sync_interval": 0,
                              "node_id": "idle", "max_request_memory": BUDGET,
                              "max_block_size": BUDGET})
    async with front_on(settings, NS) as (port, _):
        yield port


def head(method: str, path: str, length: int) -> bytes:
    return (f"{method} /{NS}/{path} HTTP/1.1\r\nHost: t\r\nContent-Length: {length}\r\n"
            f"Connection: close\r\n\r\n").encode()


async def answer(reader: asyncio.StreamReader) -> tuple[int, str]:
    got = await asyncio.wait_for(reader.read(), 10)
    status = int(got.split(b" ", 2)[1])
    return status, got.partition(b"\r\n\r\n")[2].decode(errors="replace")


async def call(port: int, method: str, path: str, body: bytes = b"") -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(method, path, len(body)) + body)
    try:
        return await answer(reader)
    finally:
        writer.close()


async def start_upload(port: int, key: str) -> str:
    status, xml = await call(port, "POST", f"{key}?uploads")
    assert status == 200, xml
    found = re.search(r"<UploadId>([^<]+)</UploadId>", xml)
    assert found is not None
    return found.group(1)


async def put_part(port: int, key: str, upload: str, number: int, body: bytes) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head("PUT", f"{key}?partNumber={number}&uploadId={upload}", len(body)) + body)
    got = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert got.startswith(b"HTTP/1.1 200"), got[:300]
    etag = re.search(rb"(?i)\r\netag: (\"[^\"]+\")", got)
    assert etag is not None
    return etag.group(1).decode()


def complete_xml(number: int, etag: str) -> bytes:
    return (f"<CompleteMultipartUpload><Part><PartNumber>{number}</PartNumber>"
            f"<ETag>{etag}</ETag></Part></CompleteMultipartUpload>").encode()


async def test_idle_uploads_give_way_to_writes_when_the_budget_is_short(port: int) -> None:
    first = await start_upload(port, "first")
    tag1 = await put_part(port, "first", first, 1, b"a" * PART)
    second = await start_upload(port, "second")
    tag2 = await put_part(port, "second", second, 1, b"b" * PART)
    status, xml = await call(port, "PUT", "object", b"c" * (8 * MiB))
    assert status == 503 and "SlowDown" in xml  # neither upload is idle long enough yet
    await asyncio.sleep(GRACE + 0.1)
    status, xml = await call(port, "PUT", "object", b"c" * (8 * MiB))
    assert status == 200, xml  # the longest idle upload (the first) made room
    status, xml = await call(port, "POST", f"first?uploadId={first}", complete_xml(1, tag1))
    assert status == 404 and "NoSuchUpload" in xml
    status, xml = await call(port, "POST", f"second?uploadId={second}", complete_xml(1, tag2))
    assert status == 200, xml
    status, body = await call(port, "GET", "second")
    assert status == 200 and body == "b" * PART


async def test_an_upload_with_a_part_arriving_is_not_idle(port: int) -> None:
    upload = await start_upload(port, "busy")
    await put_part(port, "busy", upload, 1, b"a" * PART)
    # a second part starts arriving and stalls past the grace, half sent
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head("PUT", f"busy?partNumber=2&uploadId={upload}", PART) + b"b" * (PART // 2))
    await asyncio.sleep(GRACE + 0.1)
    status, xml = await call(port, "PUT", "object", b"c" * (8 * MiB))
    assert status == 503 and "SlowDown" in xml  # the upload is busy: kept, and so is its part
    writer.write(b"b" * (PART - PART // 2))
    status, xml = await answer(reader)
    writer.close()
    assert status == 200, xml


async def test_a_part_that_arrives_for_an_aborted_upload_gives_its_memory_back(
        port: int) -> None:
    upload = await start_upload(port, "aborted")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head("PUT", f"aborted?partNumber=1&uploadId={upload}", PART) + b"a" * 1024)
    await asyncio.sleep(0.05)
    status, _ = await call(port, "DELETE", f"aborted?uploadId={upload}")
    assert status == 204
    writer.write(b"a" * (PART - 1024))
    status, xml = await answer(reader)
    writer.close()
    assert status == 404 and "NoSuchUpload" in xml
    status, xml = await call(port, "PUT", "object", b"c" * (BUDGET - MiB))
    assert status == 200, xml  # the part's 10 MiB went back to the budget
