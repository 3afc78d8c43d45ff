"""A response body written as vectors (``gateway/chunked.py``), through a real aiohttp server
and a raw socket client: the framing decodes to exactly what was written, in order, also when
the client reads late and the socket's buffer fills (the rest queued by the transport); a
record and its block go out in one ``writev`` of the block's own buffer (no copy); a block
larger than SLICE goes in chunks of at most SLICE; a client that leaves ends the writes with
an error, not a hang. The same for a body of a known length (``BodySender``, an S3 GET's):
its bytes as they are after the head, in ``writev``s of at most SLICE of its own buffers."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp import web

from s3kv.gateway.chunked import BodySender, ChunkSender
from s3kv.wire.body import SLICE, Buffer
from tests.support.localapp import serve_locally

Items = Sequence[tuple[bytes, Sequence[Buffer]]]


async def _serve(items: Items, done: asyncio.Future[BaseException | None], plain: bool = False
                 ) -> tuple[web.AppRunner, int]:
    """Serve ``items`` chunked (ChunkSender) or, ``plain``, as a body of a known length
    (BodySender)."""
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        if plain:
            resp.content_length = len(_flat(items))
        else:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        sender = (BodySender if plain else ChunkSender)(request, resp)
        try:
            await sender.start()
            for head, pieces in items:
                await sender.write(head, pieces)
            await resp.write_eof()
        except (ConnectionError, OSError) as exc:
            done.set_result(exc)
            raise
        done.set_result(None)
        return resp

    app = web.Application()
    app.router.add_get("/", handler)
    return await serve_locally(app)


def _dechunk(raw: bytes) -> tuple[bytes, list[int]]:
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"chunked" in head.lower()
    body, sizes = bytearray(), list[int]()
    while True:
        line, _, rest = rest.partition(b"\r\n")
        size = int(line, 16)
        if size == 0:
            return bytes(body), sizes
        sizes.append(size)
        body += rest[:size]
        assert rest[size:size + 2] == b"\r\n"
        rest = rest[size + 2:]


def _unframed(raw: bytes) -> tuple[bytes, list[int]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"chunked" not in head.lower()
    assert f"content-length: {len(body)}\r\n".encode() in head.lower() + b"\r\n"
    return body, []


def _fetch(items: Items, delay: float = 0.0, dribble: bool = False, plain: bool = False
           ) -> tuple[bytes, list[int]]:
    """The body and its chunks' sizes (``plain``: the body after the head, checked against
    its Content-Length, and no sizes)."""
    async def main() -> tuple[bytes, list[int]]:
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        runner, port = await _serve(items, done, plain)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            await asyncio.sleep(delay)  # the server's socket fills meanwhile
            if dribble:  # small reads, paused: the socket is full, then has room, again
                raw = b""
                while part := await reader.read(16384):
                    raw += part
                    await asyncio.sleep(0.0002)
            else:
                raw = await reader.read()
            writer.close()
            assert await asyncio.wait_for(done, 10) is None
            return _unframed(raw) if plain else _dechunk(raw)
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def _items(sizes: Sequence[int]) -> list[tuple[bytes, list[Buffer]]]:
    return [(b"record-%d;" % i, [os.urandom(n)]) for i, n in enumerate(sizes)]


def _flat(items: Items) -> bytes:
    return b"".join(head + b"".join(bytes(p) for p in pieces) for head, pieces in items)


def test_the_chunks_decode_to_what_was_written() -> None:
    items: list[tuple[bytes, Sequence[Buffer]]] = [
        *_items([0, 1, 4096, 256 * 1024]),
        (b"pieces;", [os.urandom(1000), bytearray(os.urandom(70000)), memoryview(b"x" * 9)]),
        (b"end", ()),
    ]
    body, sizes = _fetch(items)
    assert body == _flat(items)
    assert all(s <= SLICE for s in sizes)


def test_a_late_reader_gets_everything_in_order() -> None:
    items = _items([256 * 1024] * 48 + [3 * SLICE + 5])  # ~15 MiB: more than the socket holds
    body, sizes = _fetch(items, delay=0.3)
    assert body == _flat(items)
    assert max(sizes) <= SLICE  # the large block went in slices


def test_a_slow_reader_gets_everything_in_order() -> None:
    items = _items([100_000, 7, 250_000, 33] * 12)
    body, _ = _fetch(items, dribble=True)
    assert body == _flat(items)


@pytest.fixture
def writevs(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """The buffers of every ``os.writev`` made while the test runs (which still writes)."""
    calls: list[list[Any]] = []
    real = os.writev

    def writev(fd: int, bufs: list[Buffer]) -> int:
        calls.append(list(bufs))
        return real(fd, bufs)

    monkeypatch.setattr(os, "writev", writev)
    return calls


def test_a_record_and_its_block_go_in_one_writev_of_the_block_itself(
        writevs: list[list[Any]]) -> None:
    calls = writevs
    items = _items([64 * 1024])
    body, sizes = _fetch(items)
    assert body == _flat(items) and sizes == [len(body)]
    (call,) = [c for c in calls if any(memoryview(b).obj is items[0][1][0] for b in c)]
    assert bytes(call[1]) == items[0][0]  # framing, the record, the block, CRLF
    assert memoryview(call[2]).obj is items[0][1][0]


def test_a_client_that_leaves_ends_the_writes() -> None:
    async def main() -> BaseException | None:
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        runner, port = await _serve(_items([SLICE] * 256), done)  # 256 MiB: never all sent
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            await reader.read(65536)
            writer.transport.abort()
            return await asyncio.wait_for(done, 10)
        finally:
            await runner.cleanup()

    assert isinstance(asyncio.run(main()), (ConnectionError, OSError))


class _QueuedTransport:
    """A transport with bytes still queued (its socket, one end of a pair, has room)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.queued: list[bytes] = [b"queued earlier"]

    def get_extra_info(self, name: str) -> Any:
        return self.sock if name == "socket" else None

    def get_write_buffer_size(self) -> int:
        return sum(map(len, self.queued))

    def is_closing(self) -> bool:
        return False

    def writelines(self, bufs: Sequence[Buffer]) -> None:
        self.queued.append(b"".join(bufs))


class _Ready:
    async def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass


@pytest.mark.parametrize("sender_class,sent", [
    (ChunkSender, b"9\r\nrec;block\r\n"),  # a chunk: framing, record, block
    (BodySender, b"rec;block"),  # a plain body's bytes as they are
])
def test_a_chunk_never_goes_ahead_of_bytes_the_transport_holds(
        sender_class: type[BodySender], sent: bytes) -> None:
    a, b = socket.socketpair()
    with a, b:
        transport = _QueuedTransport(a)
        request = SimpleNamespace(writer=_Ready(), transport=transport)
        sender = sender_class(cast(web.Request, request), cast(web.StreamResponse, _Ready()))

        async def main() -> None:
            await sender.start()
            await sender.write(b"rec;", [b"block"])

        asyncio.run(main())
        b.setblocking(False)
        with pytest.raises(BlockingIOError):
            b.recv(1)  # nothing went straight to the socket
        assert transport.queued == [b"queued earlier", sent]


@pytest.mark.parametrize("delay,dribble", [(0.0, False), (0.3, False), (0.0, True)])
def test_a_plain_body_arrives_whole_and_in_order(delay: float, dribble: bool) -> None:
    items: list[tuple[bytes, Sequence[Buffer]]] = [
        *_items([0, 1, 4096, 256 * 1024, 3 * SLICE + 5]),
        (b"pieces;", [os.urandom(1000), bytearray(os.urandom(70000)), memoryview(b"x" * 9)]),
        *_items([256 * 1024] * 40),  # ~14 MiB in all: more than the socket holds
    ]
    body, _ = _fetch(items, delay=delay, dribble=dribble, plain=True)
    assert body == _flat(items)


def test_a_plain_body_goes_in_writevs_of_its_own_buffers_of_at_most_slice(
        writevs: list[list[Any]]) -> None:
    calls = writevs
    small, large = os.urandom(256 * 1024), os.urandom(SLICE + 7)
    items: list[tuple[bytes, Sequence[Buffer]]] = [(b"", [small])]
    body, _ = _fetch(items, plain=True)
    assert body == small
    # the whole 256 KiB object in one writev of its own buffer (aiohttp would join it with
    # the head: a copy)
    assert [[memoryview(b).obj for b in c] for c in calls] == [[small]]
    calls.clear()
    body, _ = _fetch([(b"", [large])], plain=True, delay=0.1)
    assert body == large
    assert all(sum(map(len, c)) <= SLICE for c in calls)
    assert all(memoryview(b).obj is large for c in calls for b in c)  # views, no copy

