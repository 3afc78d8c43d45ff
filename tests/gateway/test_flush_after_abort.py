"""A flush (``POST /v1/flush``, and the seal at shutdown) after a client hung up inside a large
body that was landing in the open segment (file backend): the segment holds only the room given
up, and the flush seals it at once. Before, the flush sealed only a segment with entries or
bodies still landing, yet waited for every segment in memory to reach the backend: it waited for
that one's ``seal_after`` timer (60 s here; 5 s by default), and so did a SIGTERM's seal.

Real parts, in process (to set the store's settings): the gateway's front on a file:// store
listening on a loopback socket, raw asyncio connections as clients.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from s3kv.config import Settings
from s3kv.store.store import BlockStore
from tests.support.localapp import front_on

NS = "abort-flush"
MiB = 1024 * 1024


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[int, BlockStore]]:
    settings = Settings.load({"store": f"file://{tmp_path}/store", "sync_interval": 0,
                              "node_id": "abort", "seal_after": 60})
    async with front_on(settings, NS) as (port, store):
        yield port, store


async def status_of(port: int, head: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode())
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    return answer.split(b"\r\n", 1)[0]


@pytest.mark.parametrize("extra", ["x-amz-meta-a: b\r\n",  # aiohttp's handler
                                   "x-amz-content-sha256: UNSIGNED-PAYLOAD\r\n"])  # plain lane
async def test_a_flush_after_a_landing_body_was_given_up_does_not_wait_for_the_timer(
        gateway: tuple[int, BlockStore], extra: str) -> None:
    port, store = gateway
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"PUT /{NS}/big HTTP/1.1\r\nHost: t\r\nContent-Length: {3 * MiB}\r\n{extra}"
                 "\r\n".encode() + b"b" * MiB)
    await writer.drain()
    await asyncio.sleep(0.3)
    assert store.summary()["open_segments"] == 1  # its room was taken in a segment
    writer.transport.abort()  # the client hangs up inside the body
    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    status = await status_of(port, "POST /v1/flush HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n"
                                   "Connection: close\r\n\r\n")
    took = time.monotonic() - t0
    assert status == b"HTTP/1.1 200 OK"
    assert took < 5, f"the flush took {took:.1f} s"
    assert store.summary()["open_segments"] == 0
    status = await status_of(port, f"GET /{NS}/big HTTP/1.1\r\nHost: t\r\n"
                                   "Connection: close\r\n\r\n")
    assert status == b"HTTP/1.1 404 Not Found"  # nothing of it was stored
