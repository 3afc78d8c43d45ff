"""The plain lane's one timer per connection (s3kv/gateway/plainlane.py's ``_tick``): a
connection idle between requests is closed after the ``idle_timeout`` setting (and so is one
the lane handed to aiohttp's handler), a body that stops
arriving after the body idle timeout (storing nothing, its memory given back), and a body that
keeps arriving, however slowly, is not cut.

Real parts, in process (so that the timeouts can be made short): the gateway's front on a
file:// store, listening on a loopback socket, and raw asyncio connections as clients."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import s3kv.gateway.plainlane as plainlane
from s3kv.config import Settings
from tests.support.localapp import front_on

NS = "timers"
LIMIT = 0.4  # both timeouts, in seconds


@pytest.fixture
async def port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    monkeypatch.setattr(plainlane, "TICK", 0.05)
    monkeypatch.setattr(plainlane, "BODY_IDLE_TIMEOUT", LIMIT)
    settings = Settings.load({"store": f"file://{tmp_path}/store", "etag": "fast",
                              "sync_interval": 0, "node_id": "timers",
                              "idle_timeout": LIMIT})
    async with front_on(settings, NS) as (port, _):
        yield port


def head(method: str, key: str, length: int = 0) -> bytes:
    extra = f"Content-Length: {length}\r\n" if method == "PUT" else ""
    return f"{method} /{NS}/{key} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode()


async def closed_after(reader: asyncio.StreamReader) -> float:
    """Seconds until the server closes the connection (what it sent before is dropped)."""
    started = time.monotonic()
    while await asyncio.wait_for(reader.read(1 << 16), 5):
        pass
    return time.monotonic() - started


async def status_of(reader: asyncio.StreamReader) -> int:
    """The next answer's status (its body read and dropped)."""
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = answer.decode().split("\r\n")
    length = [int(v) for k, _, v in (ln.partition(":") for ln in lines)
              if k.lower() == "content-length"]
    await reader.readexactly(length[0] if length else 0)
    return int(lines[0].split()[1])


async def test_an_idle_connection_is_closed_after_the_keepalive_timeout(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert LIMIT <= await closed_after(reader) < LIMIT + 1  # nothing sent at all
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head("PUT", "idle", 3) + b"abc")
    assert await status_of(reader) == 200
    await asyncio.sleep(LIMIT / 2)
    writer.write(head("PUT", "idle", 3) + b"xyz")  # the idle time starts again after each
    assert await status_of(reader) == 200
    assert LIMIT <= await closed_after(reader) < LIMIT + 1
    writer.close()


async def test_a_connection_handed_to_aiohttp_is_closed_after_the_same_idle_timeout(
        port: int) -> None:
    """A request the lane does not serve hands the connection to aiohttp's handler, whose own
    keep-alive default is an hour: the gateway gives it the same idle limit."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n")
    assert await status_of(reader) == 200
    await asyncio.sleep(LIMIT / 2)
    writer.write(f"GET /{NS}?list-type=2 HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    assert await status_of(reader) == 200  # the idle time starts again after each
    assert LIMIT <= await closed_after(reader) < LIMIT + 1
    writer.close()


@pytest.mark.parametrize("size", [200_000, 30_000])  # landing in its segment; into a buffer
async def test_a_stalled_body_is_cut_and_stores_nothing(port: int, size: int) -> None:
    data = os.urandom(size)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head("PUT", "stalled", size) + data[:size // 2])
    assert LIMIT <= await closed_after(reader) < LIMIT + 1
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head("GET", "stalled"))
    assert await status_of(reader) == 404
    writer.write(head("PUT", "stalled", size) + data)  # its memory came back, its room too
    assert await status_of(reader) == 200
    writer.close()


async def test_a_slow_body_that_keeps_coming_is_not_cut(port: int) -> None:
    data = os.urandom(100_000)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head("PUT", "slow", len(data)))
    for i in range(10):  # 10 x 0.1 s: more than the idle timeout in all, less between bytes
        writer.write(data[i * 10_000:(i + 1) * 10_000])
        await asyncio.sleep(LIMIT / 4)
    assert await status_of(reader) == 200
    writer.close()
