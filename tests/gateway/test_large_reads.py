"""Large socket reads (s3kv/wire/reads.py): an admitted request body is read from the socket
in reads of up to 4 MiB, and the connection reads at asyncio's size again afterwards.

Real parts: asyncio's socket transports on loopback and aiohttp's server; the only stand-in is
the gateway state's metrics counter, which read_body only increments."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from s3kv.gateway.bodies import read_body
from s3kv.gateway.state import MemoryBudget
from s3kv.sizes import KiB, MiB
from s3kv.wire.reads import READ_SIZE, larger_reads
from tests.support.localapp import serve_locally


def _read_size(transport: Any) -> int:
    """What asyncio's socket transport reads at most at a time (its ``max_size``)."""
    return int(transport.max_size)


@contextlib.asynccontextmanager
async def _connection() -> AsyncIterator[asyncio.BaseTransport]:
    """The server side's transport of a loopback connection."""
    accepted: asyncio.Future[asyncio.BaseTransport] = \
        asyncio.get_running_loop().create_future()

    async def on_client(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.set_result(w.transport)

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield await asyncio.wait_for(accepted, 5)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


async def test_reads_grow_for_the_body_and_shrink_after() -> None:
    async with _connection() as transport:
        default = _read_size(transport)
        assert default < READ_SIZE  # asyncio's own read size (256 KiB)
        with larger_reads(transport, 32 * MiB):
            assert _read_size(transport) == READ_SIZE
        assert _read_size(transport) == default
        with larger_reads(transport, 2 * MiB):  # never past the body's own size
            assert _read_size(transport) == 2 * MiB
        with larger_reads(transport, default // 2):  # a small body: asyncio's size
            assert _read_size(transport) == default
        with pytest.raises(RuntimeError), larger_reads(transport, 32 * MiB):
            raise RuntimeError("the body failed")
        assert _read_size(transport) == default


async def test_transports_without_a_read_size_are_left_alone() -> None:
    other = SimpleNamespace()  # e.g. a closed connection's None, or another loop's transport
    with larger_reads(other, 32 * MiB):  # type: ignore[arg-type]
        assert not hasattr(other, "max_size")
    with larger_reads(None, 32 * MiB):
        pass


async def _served(body_size: int) -> dict[str, Any]:
    """PUT ``body_size`` bytes in two halves to a server whose handler reads the body with
    read_body; the transport's read size while the second half is awaited, and after."""
    first_half_read = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        st: Any = SimpleNamespace(budget=MemoryBudget(64 * MiB),
                                  metrics=SimpleNamespace(bytes_in=SimpleNamespace(
                                      inc=lambda _n: None)))
        task = asyncio.create_task(read_body(request, st, 64 * MiB))
        await asyncio.sleep(0.05)  # read_body has begun; the rest of the body is held back
        during = _read_size(request.transport)
        first_half_read.set()
        body = await task
        st.budget.release(body.reserved)
        return web.json_response({"during": during,
                                  "after": _read_size(request.transport),
                                  "size": body.result.size,
                                  "default": _read_size(type(request.transport))})

    app = web.Application()
    app.router.add_put("/b", handler)
    runner, port = await serve_locally(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        half = body_size // 2
        writer.write(f"PUT /b HTTP/1.1\r\nHost: x\r\nContent-Length: {body_size}\r\n\r\n"
                     .encode() + bytes(half))
        await writer.drain()
        await asyncio.wait_for(first_half_read.wait(), 10)
        writer.write(bytes(body_size - half))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        return dict(json.loads(await reader.readexactly(length)))
    finally:
        writer.close()
        await runner.cleanup()


async def test_a_large_body_is_read_in_large_reads_then_the_connection_is_not() -> None:
    got = await _served(8 * MiB)
    assert got["size"] == 8 * MiB
    assert got["during"] == READ_SIZE
    assert got["after"] == got["default"]


async def test_a_small_body_reads_at_asyncios_size() -> None:
    got = await _served(100 * KiB)
    assert got["size"] == 100 * KiB
    assert got["during"] == got["after"] == got["default"]

