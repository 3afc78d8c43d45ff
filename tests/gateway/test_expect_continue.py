"""``Expect: 100-continue`` on the S3 front and the native API: the client is asked for its body
only once the body is admitted (authenticated, checked, its memory reserved). A request refused
before that (503 SlowDown with the memory budget full, 404 NoSuchBucket) gets its answer
without a ``100 Continue``, with ``Connection: close``: its body need not be sent. Before,
aiohttp answered ``100 Continue`` to every such request before any check ran, so a client sent
its whole body only to be refused (what retrying clients do under overload, over and over).

Real parts, in process (the budget made small): the gateway's front on a file:// store
listening on a loopback socket, raw asyncio connections as clients. The requests carry an
``x-amz-meta-*`` header, so that aiohttp's handler serves them (the plain lane asks for a body
only after its own checks, budget included, and hands a request it does not admit to
aiohttp's handler).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from s3kv.config import Settings
from s3kv.frames import frames_head
from tests.support.localapp import front_on

NS = "expect"
MiB = 1024 * 1024
BUDGET = 8 * MiB


@pytest.fixture
async def port(tmp_path: Path) -> AsyncIterator[int]:
    settings = Settings.load({"store": f"file://{tmp_path}/store", "sync_interval": 0,
                              "node_id": "expect", "max_request_memory": BUDGET,
                              "segment_size": "16MiB", "part_size": "4MiB",
                              "max_block_size": "4MiB"})
    async with front_on(settings, NS) as (port, _):
        yield port


def put_head(path: str, length: int, expect: bool = True) -> bytes:
    extra = "Expect: 100-continue\r\n" if expect else ""
    return (f"PUT {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {length}\r\n"
            f"x-amz-meta-a: b\r\n{extra}\r\n").encode()


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """The next answer: status, headers (lowercase names), body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (ln.partition(":") for ln in lines[1:] if ln)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0].split()[1]), headers, body


async def test_a_put_the_budget_cannot_admit_is_refused_before_its_body(port: int) -> None:
    # two uploads in progress hold 6 of the 8 MiB budget (their bodies keep coming, slowly)
    held = []
    for i in range(2):
        held.append(await asyncio.open_connection("127.0.0.1", port))
        held[-1][1].write(put_head(f"/{NS}/held{i}", 3 * MiB, expect=False) + b"h" * 1000)
    await asyncio.sleep(0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(put_head(f"/{NS}/refused", 4 * MiB))
    status, headers, body = await answer(reader)  # no 100 Continue first
    assert status == 503 and b"<Code>SlowDown</Code>" in body, (status, body)
    assert headers["retry-after"] and headers.get("connection", "").lower() == "close"
    writer.close()
    # the same request once the budget has room: asked for its body, stored, and the
    # connection stays usable
    for _, held_writer in held:
        held_writer.close()
    await asyncio.sleep(0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = os.urandom(4 * MiB)
    writer.write(put_head(f"/{NS}/admitted", len(data)))
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) \
        == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(data)
    assert (await answer(reader))[0] == 200
    writer.write(f"GET /{NS}/admitted HTTP/1.1\r\nHost: t\r\nx-amz-meta-a: b\r\n\r\n".encode())
    status, _, body = await answer(reader)
    assert (status, body == data) == (200, True)
    writer.close()


async def test_a_put_to_no_bucket_is_refused_before_its_body(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(put_head("/no-such-bucket/k", 1 * MiB))
    status, headers, body = await answer(reader)  # no 100 Continue first
    assert status == 404 and b"NoSuchBucket" in body, (status, body)
    assert headers.get("connection", "").lower() == "close"
    writer.close()


async def test_a_native_batch_put_is_asked_for_its_body_once_admitted(port: int) -> None:
    blocks = [("a", os.urandom(100_000)), ("b", os.urandom(70_000))]
    head = frames_head([(k, len(v)) for k, v in blocks])
    body = head + b"".join(v for _, v in blocks)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /v1/{NS}/batch-put HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}"
                 "\r\nContent-Type: application/x-s3kv-frames\r\nExpect: 100-continue\r\n\r\n"
                 .encode())
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) \
        == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(body)
    status, _, answered = await answer(reader)
    assert (status, answered) == (200, b'{"stored": 2}')
    writer.close()
