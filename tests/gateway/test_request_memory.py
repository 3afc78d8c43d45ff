"""The front's memory budget in use, ``request_memory`` in /v1/stats and
``s3kv_request_memory_bytes`` in /metrics: what the bodies in flight reserved (an S3 PUT through
aiohttp's handler, a plain-lane PUT, a native batch put), and 0 again once their clients have
hung up mid-body (nothing leaked). Before, the budget could not be seen from outside: a leak
showed only as 503 SlowDown answers that never stopped.

Real parts, in process: the gateway's front on a file:// store listening on a loopback
socket, raw asyncio connections as clients.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from s3kv.config import Settings
from s3kv.frames import frames_head
from tests.support.localapp import front_on

NS = "budget"
MiB = 1024 * 1024


@pytest.fixture
async def port(tmp_path: Path) -> AsyncIterator[int]:
    settings = Settings.load({"store": f"file://{tmp_path}/store", "sync_interval": 0,
                              "node_id": "budget", "etag": "fast"})
    async with front_on(settings, NS) as (port, _):
        yield port


async def get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer.partition(b"\r\n\r\n")[2]


async def held(port: int) -> tuple[int, int]:
    """(request_memory of /v1/stats, s3kv_request_memory_bytes of /metrics)"""
    stats = json.loads(await get(port, "/v1/stats"))
    found = re.search(rb"\ns3kv_request_memory_bytes (\S+)\n", await get(port, "/metrics"))
    assert found is not None
    return int(stats["request_memory"]), int(float(found.group(1)))


async def test_request_memory_shows_the_bodies_in_flight_and_returns_to_zero(port: int) -> None:
    assert await held(port) == (0, 0)
    blocks = [("a", 300_000), ("b", 200_000)]
    head = frames_head(blocks)
    batch = len(head) + 500_000
    starts = [
        # through aiohttp's handler (an x-amz-meta-* header is not plain)
        (f"PUT /{NS}/meta HTTP/1.1\r\nHost: t\r\nContent-Length: {3 * MiB}\r\n"
         "x-amz-meta-a: b\r\n\r\n").encode() + b"m" * 1000,
        # the plain lane
        (f"PUT /{NS}/plain HTTP/1.1\r\nHost: t\r\nContent-Length: {40_000}\r\n"
         "x-amz-content-sha256: UNSIGNED-PAYLOAD\r\n\r\n").encode() + b"p" * 1000,
        # a native batch put
        (f"POST /v1/{NS}/batch-put HTTP/1.1\r\nHost: t\r\nContent-Length: {batch}\r\n"
         "Content-Type: application/x-s3kv-frames\r\n\r\n").encode() + head + b"n" * 1000,
    ]
    conns = []
    for start in starts:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(start)
        conns.append(writer)
    await asyncio.sleep(0.3)
    assert await held(port) == (3 * MiB + 40_000 + batch,) * 2
    for writer in conns:  # the clients hang up mid-body
        writer.transport.abort()
    for _ in range(50):
        if await held(port) == (0, 0):
            break
        await asyncio.sleep(0.1)
    assert await held(port) == (0, 0)
