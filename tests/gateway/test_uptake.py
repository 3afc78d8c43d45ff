"""What a client takes of an answer (``gateway/uptake.py``), on real loopback TCP connections
through asyncio's transport: a client that reads nothing takes nothing, however the bytes
move between the transport and the kernel; reading less than ``MIN_TAKE`` is not taking;
nothing left waiting is not a stall; a socket that cannot tell what was acknowledged (a Unix
socket) falls back on the transport's queue; the sender's own time away (a batch get's next
block read slowly from the backend) is not the client's stall (``chunked.drained``)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

import s3kv.gateway.chunked as chunked
from s3kv.gateway.uptake import MIN_TAKE, Uptake

ANSWER = 8 << 20  # more than the kernel holds for a client that reads nothing


@pytest.fixture
async def pair() -> AsyncIterator[tuple[socket.socket, asyncio.StreamWriter]]:
    """A client socket with a small receive buffer and the server's writer of its answer."""
    got: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()

    async def accepted(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        got.set_result(w)

    server = await asyncio.start_server(accepted, "127.0.0.1", 0)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(server.sockets[0].getsockname())
    client.setblocking(False)
    writer = await got
    yield client, writer
    writer.transport.abort()
    client.close()
    server.close()


async def read(client: socket.socket, n: int) -> int:
    """Read up to ``n`` bytes as they come (within a second): how many."""
    loop = asyncio.get_running_loop()
    got = 0
    while got < n:
        try:
            got += len(await asyncio.wait_for(loop.sock_recv(client, n - got), 1))
        except TimeoutError:
            break
    return got


async def test_a_client_that_reads_nothing_takes_nothing(
        pair: tuple[socket.socket, asyncio.StreamWriter]) -> None:
    client, writer = pair
    uptake = Uptake(writer.transport)
    assert uptake.took()  # nothing waits on it yet
    writer.write(bytes(ANSWER))
    await asyncio.sleep(0.1)
    assert writer.transport.get_write_buffer_size() > 0
    for _ in range(5):
        await asyncio.sleep(0.05)
        assert not uptake.took()
    assert uptake.idle() >= 0.2
    assert await read(client, MIN_TAKE // 2) == MIN_TAKE // 2
    await asyncio.sleep(0.05)
    assert not uptake.took()  # a trickle is not taking
    assert await read(client, MIN_TAKE) == MIN_TAKE
    await asyncio.sleep(0.05)
    assert uptake.took()
    assert uptake.idle() < 0.1


async def test_nothing_left_waiting_is_not_a_stall(
        pair: tuple[socket.socket, asyncio.StreamWriter]) -> None:
    client, writer = pair
    uptake = Uptake(writer.transport)
    writer.write(b"x" * 1000)
    assert await read(client, 1000) == 1000
    await asyncio.sleep(0.05)  # acknowledged
    assert uptake.took()  # less than MIN_TAKE, but all there was
    assert uptake.idle() < 0.1


async def test_without_acknowledgements_the_transports_queue_stands_for_progress() -> None:
    a, b = socket.socketpair()  # Unix sockets: no TCP_INFO
    _reader, writer = await asyncio.open_connection(sock=a)
    try:
        uptake = Uptake(writer.transport)
        writer.write(bytes(ANSWER))
        await asyncio.sleep(0.05)
        queued = writer.transport.get_write_buffer_size()
        assert queued > 0 and not uptake.took()
        b.setblocking(False)
        loop = asyncio.get_running_loop()
        got = 0
        while writer.transport.get_write_buffer_size() > queued - 2 * MIN_TAKE:
            got += len(await asyncio.wait_for(loop.sock_recv(b, 1 << 20), 1))
            await asyncio.sleep(0.01)
        assert got and uptake.took()
    finally:
        writer.transport.abort()
        b.close()


async def test_the_senders_time_away_is_not_the_clients_stall(
        pair: tuple[socket.socket, asyncio.StreamWriter],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A small piece the client takes at once, then more than the timeout with nothing to
    send (a slow backend read), then a large piece the client reads as it comes: no cut."""
    monkeypatch.setattr(chunked, "SEND_IDLE_TIMEOUT", 0.3)
    client, writer = pair
    transport = writer.transport
    uptake = Uptake(transport)
    writer.write(b"x" * 1000)
    await chunked.drained(writer.drain(), transport, uptake)
    assert await read(client, 1000) == 1000
    await asyncio.sleep(0.5)  # the sender's time away
    writer.write(bytes(ANSWER))
    reader = asyncio.ensure_future(read(client, ANSWER))
    await chunked.drained(writer.drain(), transport, uptake)  # does not raise
    assert await reader == ANSWER
