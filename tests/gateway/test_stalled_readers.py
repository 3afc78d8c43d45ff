"""Clients that stop reading their GETs hold bounded memory and are cut.

A block read from the backend stays counted in the store's read budget until its response has
let go of it (s3kv/store/readbudget.py), so GETs whose clients take nothing hold at most
``max_read_memory`` and later reads wait; a response the client takes none of (acknowledges
less than 64 KiB of: gateway/uptake.py) for ``SEND_IDLE_TIMEOUT`` seconds is cut, in the plain
lane (plainlane.py's tick) and in aiohttp's handler (chunked.drained), and the reads that
waited go on. Before, 100 such GETs of 32 MiB objects took a gateway on an S3 backend past
3.4 GiB of memory, growing while they lasted.

Real parts, in process (so that the timeouts can be made short): the gateway's front on an
S3 store on the shared moto server, raw sockets with a small receive buffer as the clients
that stop reading. A stalled client reads what it got only once the gateway has closed its
end of the connection (found among this process's descriptors)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator

import pytest

import s3kv.gateway.chunked as chunked
import s3kv.gateway.plainlane as plainlane
from s3kv.config import MiB, Settings
from s3kv.gateway.uptake import unacknowledged
from s3kv.store.store import BlockStore
from tests.support.localapp import front_on
from tests.support.s3server import MotoServer

NS = "stalled"
LIMIT = 2.0  # seconds a response may make no progress
#: each object: more than the kernel's largest send buffer here (4 MiB), so that an answer
#: the client does not read stays in part with the gateway; two fit in the read memory, a
#: third does not
SIZE = 6 * MiB
READ_MEMORY = 16 * MiB


@contextlib.asynccontextmanager
async def front(s3_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch,
                codec: str = "none") -> AsyncIterator[tuple[int, BlockStore]]:
    """The front on a store of ``bucket`` whose namespace NS has ``codec``: (port, store)."""
    monkeypatch.setattr(plainlane, "TICK", 0.05)
    monkeypatch.setattr(plainlane, "SEND_IDLE_TIMEOUT", LIMIT)
    monkeypatch.setattr(chunked, "SEND_IDLE_TIMEOUT", LIMIT)
    settings = Settings.load({"store": f"s3://{bucket}/gw?endpoint={s3_server.endpoint}",
                              "etag": "fast", "sync_interval": 0, "node_id": "stalled",
                              "read_ahead": 0, "max_read_memory": READ_MEMORY,
                              "max_block_size": 8 * MiB, "default_codec": codec})
    async with front_on(settings, NS) as served:
        yield served


@pytest.fixture
async def gateway(s3_server: MotoServer, bucket: str,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[int, BlockStore]]:
    async with front(s3_server, bucket, monkeypatch) as served:
        yield served


def stalled_get(port: int, path: str) -> socket.socket:
    """A GET whose client reads nothing of the answer (a small receive window)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    return s


async def sealed_blocks(store: BlockStore, prefix: str) -> dict[str, bytes]:
    """Five random blocks of SIZE, sealed and let go of: every read goes to the backend."""
    blocks = {f"{prefix}{i}": os.urandom(SIZE) for i in range(5)}
    for key, data in blocks.items():
        await store.put(NS, key.encode(), data)
    await store.flush()
    return blocks


async def let_go(store: BlockStore) -> None:
    """Every block read from the backend is let go of (within 2 s)."""
    for _ in range(100):
        if store.fetcher.read_memory == 0:
            break
        await asyncio.sleep(0.02)
    assert store.fetcher.read_memory == 0


async def drain_socket(s: socket.socket) -> bytes:
    """All the socket gets until the server ends the connection (read on the loop: the
    gateway runs on it too)."""
    s.setblocking(False)
    loop = asyncio.get_running_loop()
    got = b""
    with contextlib.suppress(ConnectionResetError):  # cut: the rest is dropped
        while chunk := await asyncio.wait_for(loop.sock_recv(s, 1 << 20), 5):
            got += chunk
    return got


def gateway_end(client: socket.socket) -> socket.socket | None:
    """The gateway's end of ``client``'s connection (this process's), as a duplicate of its
    descriptor (close it soon: it keeps the connection open), or None once it is closed."""
    want = client.getsockname()
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = os.dup(int(name))
        except OSError:  # gone
            continue
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # not a socket
            os.close(fd)
            continue
        with contextlib.suppress(OSError):
            if sock.type == socket.SOCK_STREAM and sock.getpeername() == want:
                return sock
        sock.close()
    return None


async def cut(client: socket.socket, within: float = 4 * LIMIT) -> None:
    """Wait until the gateway has closed its end of ``client``'s connection. The client reads
    nothing meanwhile: reading would be taking the answer (a test that read a stalled GET the
    moment the read it blocked was served read, now and then, one whose cut was due a few
    milliseconds later: it ended 200)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + within
    while (end := gateway_end(client)) is not None:
        end.close()
        assert loop.time() < until, "not cut"
        await asyncio.sleep(0.05)


def send_buffer_limit() -> int:
    """The largest send buffer a process may ask for (``net.core.wmem_max``)."""
    with open("/proc/sys/net/core/wmem_max") as f:
        return int(f.read())


async def fetch(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    assert head.split()[1] in ("200", "206"), head
    body = await reader.read()
    writer.close()
    return body


@pytest.mark.parametrize("query", ["", "?partNumber=1"])  # the plain lane; aiohttp's handler
async def test_stalled_gets_hold_bounded_memory_and_are_cut(
        gateway: tuple[int, BlockStore], query: str) -> None:
    port, store = gateway
    blocks = await sealed_blocks(store, "k")
    loop = asyncio.get_running_loop()
    reads = store.stats.backend_reads
    stalled = [stalled_get(port, f"/{NS}/k{i}{query}") for i in range(4)]
    peak = 0
    for _ in range(20):  # 1 s: the first reads are in, the others wait for room
        await asyncio.sleep(0.05)
        peak = max(peak, store.fetcher.read_memory)
    assert SIZE <= peak <= READ_MEMORY
    assert store.stats.backend_reads - reads == READ_MEMORY // SIZE  # 2 of the 4 read
    # a client that reads gets its block once the stalled ones are cut (LIMIT, a tick or two)
    started = loop.time()
    assert await asyncio.wait_for(fetch(port, f"/{NS}/k4{query}"), 10) == blocks["k4"]
    assert loop.time() - started < 6 * LIMIT
    for s in stalled:
        await cut(s)
        got = await drain_socket(s)
        assert len(got) < SIZE
        s.close()
    await let_go(store)


@pytest.mark.parametrize("query", ["", "?partNumber=1"])  # the plain lane; aiohttp's handler
async def test_a_stalled_get_is_cut_while_its_send_buffer_grows(
        gateway: tuple[int, BlockStore], query: str) -> None:
    """The kernel's send buffer grows on its own (TCP's autotuning) and takes more of an
    answer its client does not read: that is not the client taking any (uptake.py). Counted
    as progress (the transport's queue fell), it put off the cut by a timeout, in both lanes
    (cut at 3.5-4 s here, not within 3). The gateway's send buffer is set small before the
    request and grown by hand once, before the cut is due, by enough for the kernel to wake
    the writer (a third of it free) and within ``net.core.wmem_max`` (checked with this
    machine's 4 MiB and with Linux's default 208 KiB)."""
    port, store = gateway
    await sealed_blocks(store, "g")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    for _ in range(100):  # accepted
        if (end := gateway_end(s)) is not None:
            break
        await asyncio.sleep(0.01)
    assert end is not None
    end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # the kernel doubles it
    end.close()
    s.sendall(f"GET /{NS}/g0{query} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    for _ in range(100):  # read and being answered
        await asyncio.sleep(0.02)
        if store.fetcher.read_memory >= SIZE:
            break
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.sleep(0.75 * LIMIT)
    end = gateway_end(s)
    assert end is not None
    held = unacknowledged(end.fileno())
    end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, min(send_buffer_limit(), 2 * MiB))
    await asyncio.sleep(0.1)
    assert unacknowledged(end.fileno()) > held + 64 * 1024  # the kernel took more of the answer
    end.close()
    await cut(s)
    assert loop.time() - started < 1.5 * LIMIT  # not a timeout after the buffer grew
    assert len(await drain_socket(s)) < SIZE
    s.close()
    await let_go(store)


@pytest.mark.parametrize("query", ["", "?partNumber=1"])  # the plain lane; aiohttp's handler
async def test_a_slow_reader_is_not_cut(gateway: tuple[int, BlockStore], query: str) -> None:
    """A client that takes its answer slowly, 1 MiB every LIMIT / 4 seconds, for longer than
    LIMIT in all, gets all of it: each time the gateway looks, it has taken some."""
    port, store = gateway
    blocks = await sealed_blocks(store, "s")
    s = stalled_get(port, f"/{NS}/s0{query}")
    s.setblocking(False)
    loop = asyncio.get_running_loop()
    got = b""
    started = loop.time()
    while b"\r\n\r\n" not in got or len(got.partition(b"\r\n\r\n")[2]) < SIZE:
        await asyncio.sleep(LIMIT / 4)
        taken = 0
        while taken < MiB:
            chunk = await asyncio.wait_for(loop.sock_recv(s, MiB - taken), 5)
            assert chunk, "cut"
            taken += len(chunk)
            got += chunk
            if len(got.partition(b"\r\n\r\n")[2]) >= SIZE:
                break
    assert loop.time() - started > LIMIT
    assert got.partition(b"\r\n\r\n")[2] == blocks["s0"]
    s.close()
    await let_go(store)


async def test_a_stalled_batch_get_holds_bounded_memory_and_is_cut(
        gateway: tuple[int, BlockStore]) -> None:
    """A batch get reads ahead of what it has sent; a reader that takes nothing holds what was
    read (its one run, here all of the read memory) only until it is cut."""
    port, store = gateway
    blocks = await sealed_blocks(store, "b")
    body = b'{"keys": ["b0", "b1", "b2", "b3"]}'
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(f"POST /v1/{NS}/batch-get HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n"
              f"Content-Type: application/json\r\n\r\n".encode() + body)
    peak = 0
    for _ in range(20):
        await asyncio.sleep(0.05)
        peak = max(peak, store.fetcher.read_memory)
    assert 0 < peak <= READ_MEMORY
    assert store.fetcher.read_memory >= SIZE  # read, not sent: still held
    scrape = (await fetch(port, "/metrics")).decode()
    gauge = [ln for ln in scrape.splitlines() if ln.startswith("s3kv_read_memory_bytes ")]
    assert gauge and SIZE <= float(gauge[0].split()[1]) <= READ_MEMORY
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await asyncio.wait_for(fetch(port, f"/{NS}/b4"), 10) == blocks["b4"]
    assert loop.time() - started < 6 * LIMIT
    await cut(s)
    got = await drain_socket(s)
    assert len(got) < 4 * SIZE  # cut short of its blocks and of the stream's end
    s.close()
    await let_go(store)


@pytest.mark.parametrize("query", ["", "?partNumber=1"])
async def test_stalled_gets_of_decoded_blocks_hold_their_memory_until_cut(
        s3_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch, query: str) -> None:
    """A block stored compressed is read small and decoded large: the decoded buffer counts
    until its response lets go of it, so a later read waits for the stalled ones to be cut.
    Uncounted, each stalled GET held a whole decoded block (a 4-bit KV codec: ~4x what was
    read) and every later read went ahead, without bound."""
    async with front(s3_server, bucket, monkeypatch, "zstd:level=1") as (port, store):
        blocks = {f"z{i}": os.urandom(1024) * (SIZE // 1024) for i in range(5)}
        for key, data in blocks.items():
            await store.put(NS, key.encode(), data)
        await store.flush()
        read, reads = store.stats.backend_read_bytes, store.stats.backend_reads
        stalled = [stalled_get(port, f"/{NS}/z{i}{query}") for i in range(4)]
        for _ in range(100):  # the four are read (each small) and decoded
            await asyncio.sleep(0.02)
            if store.fetcher.read_memory >= 4 * SIZE:
                break
        assert store.stats.backend_read_bytes - read < SIZE // 8  # stored small
        assert store.fetcher.read_memory >= 4 * SIZE > READ_MEMORY
        loop = asyncio.get_running_loop()
        started = loop.time()
        later = asyncio.ensure_future(fetch(port, f"/{NS}/z4{query}"))
        await asyncio.sleep(LIMIT / 2)
        assert not later.done() and store.stats.backend_reads - reads == 4  # waits for room
        assert await asyncio.wait_for(later, 10) == blocks["z4"]
        assert loop.time() - started < 6 * LIMIT
        for s in stalled:
            await cut(s)
            assert len(await drain_socket(s)) < SIZE
            s.close()
        await let_go(store)
