"""A large admitted body taken from the socket past aiohttp's parser (s3kv/gateway/takeover.py,
S3RequestHandler.take_body): every byte arrives once and in order, the connection's next
request is parsed as before, and a body given up on or cut short costs nothing afterwards.

Real parts: aiohttp's server through the gateway's own connection handler (front_runner), on
loopback, with a raw socket client that controls where each byte goes. The only stand-in is the
gateway state's metrics counter, which read_body only increments."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import json
import os
import weakref
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

from aiohttp import StreamReader, web
from aiohttp.base_protocol import BaseProtocol

from s3kv.errors import RequestError
from s3kv.gateway.bodies import read_body
from s3kv.gateway.protocol import front_runner
from s3kv.gateway.state import MemoryBudget
from s3kv.gateway.takeover import TAKE_MIN, BodyLanding, BodyTake
from s3kv.sizes import KiB, MiB

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Gate:
    """What the test's handler saw, and the points where the client waits for it."""

    def __init__(self) -> None:
        self.budget = MemoryBudget(64 * MiB)
        self.reading = asyncio.Event()  # read_body has begun on the current request
        self.delay = 0.0  # before read_body begins
        self.idle = 20.0


@contextlib.asynccontextmanager
async def _server() -> AsyncIterator[tuple[int, Gate]]:
    gate = Gate()

    async def handler(request: web.Request) -> web.Response:
        st: Any = SimpleNamespace(budget=gate.budget, metrics=SimpleNamespace(
            bytes_in=SimpleNamespace(inc=lambda _n: None)))
        await asyncio.sleep(gate.delay)
        task = asyncio.create_task(read_body(request, st, 64 * MiB, idle=gate.idle))
        await asyncio.sleep(0.05)
        gate.reading.set()
        try:
            body = await task
        except RequestError as exc:
            return web.json_response({"error": exc.code}, status=exc.status)
        finally:
            gate.reading.clear()
        gate.budget.release(body.reserved)
        return web.json_response({
            "size": body.result.size, "md5": hashlib.md5(body.data).hexdigest(),
            # the bytes aiohttp's parser passed on: all of them unless the body was taken
            "parsed": request.content.total_bytes})

    app = web.Application()
    app.router.add_put("/{name}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    front = front_runner(runner, shutdown_timeout=1, access_log=None, auto_decompress=False)
    await front.setup()
    site = web.TCPSite(front, "127.0.0.1", 0)
    await site.start()
    try:
        yield front.addresses[0][1], gate
    finally:
        await front.cleanup()
        await runner.cleanup()


def _head(name: str, size: int) -> bytes:
    return f"PUT /{name} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode()


async def _answer(conn: Conn) -> tuple[int, dict[str, Any]]:
    reader = conn[0]
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status = int(head.split(b" ", 2)[1])
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return status, dict(json.loads(await reader.readexactly(length)))


async def _send(conn: Conn, data: bytes) -> None:
    conn[1].write(data)
    await conn[1].drain()


async def test_a_large_body_is_taken_whole_and_the_next_request_is_parsed() -> None:
    body, after = os.urandom(8 * MiB + 5), os.urandom(300 * KiB)
    async with _server() as (port, gate):
        conn = await asyncio.open_connection("127.0.0.1", port)
        await _send(conn, _head("a", len(body)) + body[:100 * KiB])
        await asyncio.wait_for(gate.reading.wait(), 10)
        # the rest of the body and, in the same writes, the whole next request
        await _send(conn, body[100 * KiB:] + _head("b", len(after)) + after)
        status, got = await _answer(conn)
        assert status == 200 and got["size"] == len(body)
        assert got["md5"] == hashlib.md5(body).hexdigest()
        assert got["parsed"] < len(body) - TAKE_MIN  # taken: the parser saw only its start
        status, got = await _answer(conn)
        assert (status, got["size"]) == (200, len(after))
        assert got["md5"] == hashlib.md5(after).hexdigest()
        conn[1].close()
        assert gate.budget.used == 0


async def test_a_body_the_parser_holds_back_is_not_lost() -> None:
    """The handler starts late: aiohttp's stream is full and its parser paused with the rest
    of a read; the take gets those bytes first, then the socket's."""
    body = os.urandom(6 * MiB)
    async with _server() as (port, gate):
        gate.delay = 0.3
        conn = await asyncio.open_connection("127.0.0.1", port)
        conn[1].write(_head("a", len(body)) + body[:3 * MiB])
        await asyncio.wait_for(gate.reading.wait(), 10)
        await _send(conn, body[3 * MiB:])
        status, got = await _answer(conn)
        assert status == 200 and got["md5"] == hashlib.md5(body).hexdigest()
        assert got["parsed"] < len(body)


async def test_a_small_body_goes_through_the_parser() -> None:
    body = os.urandom(100 * KiB)
    async with _server() as (port, _gate):
        conn = await asyncio.open_connection("127.0.0.1", port)
        await _send(conn, _head("a", len(body)) + body)
        status, got = await _answer(conn)
        assert status == 200 and got["parsed"] == len(body)
        assert got["md5"] == hashlib.md5(body).hexdigest()


async def test_a_body_given_up_on_is_dropped_and_the_connection_stays_in_step() -> None:
    body, after = os.urandom(4 * MiB), os.urandom(10 * KiB)
    async with _server() as (port, gate):
        gate.idle = 0.3  # the handler gives up on a body that stalls this long
        conn = await asyncio.open_connection("127.0.0.1", port)
        await _send(conn, _head("a", len(body)) + body[:MiB])
        status, got = await _answer(conn)
        assert (status, got["error"]) == (400, "RequestTimeout")
        assert gate.budget.used == 0
        gate.idle = 20.0
        # the body's rest arrives late: read and dropped; the next request is answered
        await _send(conn, body[MiB:] + _head("b", len(after)) + after)
        status, got = await _answer(conn)
        assert status == 200 and got["md5"] == hashlib.md5(after).hexdigest()


async def test_a_connection_lost_inside_a_taken_body_frees_it() -> None:
    body = os.urandom(4 * MiB)
    async with _server() as (port, gate):
        conn = await asyncio.open_connection("127.0.0.1", port)
        await _send(conn, _head("a", len(body)) + body[:MiB])
        await asyncio.wait_for(gate.reading.wait(), 10)
        conn[1].close()
        for _ in range(100):
            if gate.budget.used == 0 and not gate.reading.is_set():
                break
            await asyncio.sleep(0.05)
        assert gate.budget.used == 0


async def test_a_body_cut_short_is_freed_without_the_garbage_collector() -> None:
    """What a cut-short body held (a landed one: windows onto its segment's file, which keep
    the file from being written over once evicted) goes when its reader lets go of it, not
    when the cyclic garbage collector next runs: the error the reader gets must not hang the
    take on that error's own traceback (the take keeps the connection's error, and raising
    that very error put this frame, which holds the take, in its traceback)."""
    gc.collect()
    gc.disable()
    try:
        take = BodyTake(cast(StreamReader, None), [b"first"], 1000)
        take.fail(ConnectionResetError("the connection closed inside the body"))
        assert await take.readchunk() == (b"first", False)
        try:
            await take.readchunk()
            raise AssertionError("a cut-short body read on")
        except ConnectionResetError as exc:
            assert "closed inside the body" in str(exc)
        gone = weakref.ref(take)
        del take
        assert gone() is None, "a cut-short body is kept alive by a reference cycle"
    finally:
        gc.enable()


class _Seen:
    """A landing's sums that keep the pieces they are fed."""

    def __init__(self, seen: list[bytes]) -> None:
        self.seen = seen
        self.lengths: list[int] = []

    def feed(self, piece: memoryview) -> None:
        self.seen.append(bytes(piece))

    def settle(self, crcs: list[int]) -> None:
        raise AssertionError("fed, not settled")


async def test_a_landing_shows_its_watch_each_piece_of_its_spans_once_in_order() -> None:
    """BodyLanding's sums (how a batch put's blocks are checksummed as they arrive) sees the
    bytes copied in from what the parser had, then each read, as the spans hold them; nothing
    once the landing is given up (its later bytes go to a scratch buffer)."""
    loop = asyncio.get_running_loop()
    content = StreamReader(BaseProtocol(loop), 2**16, loop=loop)
    spans = [memoryview(bytearray(100)), memoryview(bytearray(57))]
    seen: list[bytes] = []
    landing = BodyLanding(content, [b"head"], [b"x" * 30], spans, _Seen(seen))
    data, at = os.urandom(127), 0
    while at < len(data):
        buf = landing.buffer()
        n = min(len(buf), 37, len(data) - at)
        buf[:n] = data[at:at + n]
        landing.received(n)
        at += n
    assert landing.remaining == 0
    assert b"".join(seen) == b"x" * 30 + data == b"".join(bytes(s) for s in spans)
    assert max(map(len, seen)) <= 37

    seen.clear()
    dropped = BodyLanding(content, [], [], [memoryview(bytearray(64))], _Seen(seen))
    dropped.buffer()[:16] = b"y" * 16
    dropped.received(16)
    dropped.drop()
    dropped.buffer()[:48] = b"z" * 48
    dropped.received(48)
    assert seen == [b"y" * 16] and dropped.remaining == 0
