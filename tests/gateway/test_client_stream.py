"""The native client's batch-get stream received in place (s3kv/client_stream.py over
s3kv/wire/dechunk.py and fastget), over real HTTP: streams chunked and cut anywhere, each
block's bytes landing in the buffer its reader gives, the connection paused while the reader
falls behind (and not reused paused), errors (a lost or stalled gateway, a malformed stream, a
chunked error answer, the sink's own), and a real gateway's batch gets read that way. A tiny
aiohttp app stands in for the gateway where a real one cannot be made to misbehave. The parsers
without sockets: test_stream_parsing.py."""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from collections.abc import Callable

import pytest
from aiohttp import web

from s3kv.client import S3KVClient
from s3kv.client_io import BlockBody
from s3kv.client_landing import BlockIn
from s3kv.errors import BackendUnavailable, Backpressure, NamespaceNotFound, RequestError
from s3kv.frames import STREAM, block_record, end_record
from tests.gateway.conftest import TOKEN, Gateway
from tests.support.streams import records

KiB, MiB = 1024, 1024 * 1024


async def _serve(handler: Callable[[web.Request], object], port: int) -> web.AppRunner:
    app = web.Application()
    app.router.add_post("/v1/ns/batch-get", handler)  # type: ignore[arg-type]
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def _streaming(pieces: list[bytes], status: int = 200, headers: dict[str, str] | None = None
               ) -> Callable[[web.Request], object]:
    """A handler answering with ``pieces``, each written as one chunk of a chunked body."""
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=status, headers=headers or {"Content-Type": STREAM})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for piece in pieces:
            await resp.write(piece)
        await resp.write_eof()
        return resp

    return handler


@pytest.mark.parametrize("piece", [7, 257, 4096])
async def test_a_chunked_stream_cut_anywhere(piece: int, unused_tcp_port: int) -> None:
    blocks: list[tuple[str, bytes | None]] = [("a", os.urandom(3 * KiB)), ("b", None),
                                              ("c", os.urandom(50 * KiB))]
    body = records(blocks)
    handler = _streaming([body[pos:pos + piece] for pos in range(0, len(body), piece)])
    runner = await _serve(handler, unused_tcp_port)
    try:
        async with S3KVClient(f"http://127.0.0.1:{unused_tcp_port}") as kv:
            for _ in range(2):  # the second on the kept-alive connection
                assert await kv.get_many("ns", [k for k, _ in blocks]) == [d for _, d in blocks]
    finally:
        await runner.cleanup()


async def test_a_slow_reader_holds_the_stream(unused_tcp_port: int) -> None:
    """The gateway's writes stall while the reader sits on the first block: the client stops
    reading instead of holding the whole stream in memory."""
    n, size = 64, 1 * MiB
    block = os.urandom(size)
    written: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": STREAM})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(n):
            await resp.write(block_record(str(i), size) + block)
            written.append(i)
        await resp.write(end_record(n))
        await resp.write_eof()
        return resp

    release = asyncio.Event()
    got: list[int] = []

    async def sink(i: int, body: BlockBody | None) -> None:
        assert body is not None
        buf = bytearray(size)
        await body.readinto(memoryview(buf))
        assert buf == block
        got.append(i)
        if i == 0:
            await release.wait()

    runner = await _serve(handler, unused_tcp_port)
    try:
        async with S3KVClient(f"http://127.0.0.1:{unused_tcp_port}") as kv:
            task = asyncio.ensure_future(kv.fetch("ns", [str(i) for i in range(n)], sink))
            await asyncio.sleep(1.0)
            stalled_at = len(written)
            release.set()
            assert all(await task)
        assert got == list(range(n))
        # socket buffers hold some blocks; a reader that never paused would have all 64 sent
        assert stalled_at < n // 2, stalled_at
    finally:
        await runner.cleanup()


async def test_bad_chunking_is_a_malformed_stream(unused_tcp_port: int) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": STREAM,
                                           "Transfer-Encoding": "chunked"})
        await resp.prepare(request)
        transport = request.transport
        assert transport is not None
        transport.write(b"zz\r\n")  # raw: not a chunk size
        await asyncio.sleep(0.1)
        return resp

    runner = await _serve(handler, unused_tcp_port)
    try:
        async with S3KVClient(f"http://127.0.0.1:{unused_tcp_port}") as kv:
            with pytest.raises(RequestError) as err:
                await kv.get_many("ns", ["a"])
            assert err.value.code == "MalformedFrames"
    finally:
        await runner.cleanup()


async def test_a_gateways_batch_get_lands_in_the_readers_buffer(
        gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks read from a real gateway arrive whole and byte-exact, and almost every byte was
    received straight into the reader's buffer (BlockIn.landed), not copied in."""
    landed = [0]
    real = BlockIn.landed

    def counting(self: BlockIn, n: int) -> None:
        landed[0] += n
        real(self, n)

    monkeypatch.setattr(BlockIn, "landed", counting)
    ns = f"st{uuid.uuid4().hex[:10]}"
    rnd = random.Random(7)
    blocks = {f"k{i}": rnd.randbytes(rnd.choice([4 * KiB, 300 * KiB, 3 * MiB]))
              for i in range(12)}
    async with S3KVClient(gateway.endpoint, token=TOKEN) as kv:
        await kv.create_namespace(ns)
        await kv.put_many(ns, blocks)
        keys = [*blocks, "absent"]
        out: dict[str, bytes | None] = {}

        async def sink(i: int, body: BlockBody | None) -> None:
            if body is None:
                out[keys[i]] = None
                return
            buf = bytearray(body.length)
            await body.readinto(memoryview(buf))
            out[keys[i]] = bytes(buf)

        done = await kv.fetch(ns, keys, sink)
    assert out == {**blocks, "absent": None}
    assert done == [True] * len(blocks) + [False]
    total = sum(map(len, blocks.values()))
    assert landed[0] > 0.9 * total, (landed[0], total)


@pytest.mark.parametrize("stall", [False, True])
async def test_a_gateway_lost_mid_stream_is_unavailable(stall: bool,
                                                        unused_tcp_port: int) -> None:
    """A gateway that drops the connection (or stops sending) in the middle of a block: the
    fetch ends with BackendUnavailable within the client's timeout, the block is not
    delivered, and the gateway is marked down."""
    over = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": STREAM})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(block_record("a", 1 * MiB) + os.urandom(100 * KiB))
        if stall:
            await asyncio.wait_for(over.wait(), 30)
        assert request.transport is not None
        request.transport.close()
        return resp

    runner = await _serve(handler, unused_tcp_port)
    seen: list[int] = []

    async def sink(i: int, body: BlockBody | None) -> None:
        assert body is not None
        seen.append(i)
        await body.readinto(memoryview(bytearray(body.length)))

    try:
        url = f"http://127.0.0.1:{unused_tcp_port}"
        async with S3KVClient(url, timeout=1.0) as kv:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(BackendUnavailable):
                await kv.fetch("ns", ["a"], sink)
            assert loop.time() - t0 < 5
            assert seen == [0]
            assert not kv.gateways.is_up(url)
    finally:
        over.set()
        await runner.cleanup()


async def test_blocks_delivered_before_a_stream_breaks_are_marked_done(
        unused_tcp_port: int) -> None:
    """The caller's ``done`` holds the blocks that arrived whole before the gateway was lost:
    the fetch raises, and a connector keeps those (the LMCache plugin's leading chunks)."""
    blocks = [os.urandom(40 * KiB) for _ in range(4)]

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": STREAM})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(2):
            await resp.write(block_record(str(i), len(blocks[i])) + blocks[i])
        await resp.write(block_record("2", len(blocks[2])) + blocks[2][:1000])
        await asyncio.sleep(0.2)
        assert request.transport is not None
        request.transport.close()
        return resp

    got: dict[int, bytes] = {}

    async def sink(i: int, body: BlockBody | None) -> None:
        assert body is not None
        buf = bytearray(body.length)
        await body.readinto(memoryview(buf))
        got[i] = bytes(buf)

    runner = await _serve(handler, unused_tcp_port)
    try:
        async with S3KVClient(f"http://127.0.0.1:{unused_tcp_port}", timeout=5.0) as kv:
            done = [False] * 4
            with pytest.raises(BackendUnavailable):
                await kv.fetch("ns", ["0", "1", "2", "3"], sink, done)
        assert done == [True, True, False, False]
        assert [got[0], got[1]] == blocks[:2]
    finally:
        await runner.cleanup()


async def test_a_connection_paused_for_a_reader_is_not_reused_paused(
        unused_tcp_port: int) -> None:
    """A stream of small blocks can be all in while its reader is still behind (the connection
    paused for it); when that reader then fails, the connection goes on serving the client's
    next batch get instead of waiting for a resume that never comes."""
    blocks: list[tuple[str, bytes | None]] = [(str(i), os.urandom(2 * KiB)) for i in range(10)]
    handler = _streaming([records(blocks)])

    class Stop(Exception):
        pass

    async def slow_then_fails(i: int, body: BlockBody | None) -> None:
        await asyncio.sleep(0.3)  # every byte arrives meanwhile
        raise Stop

    runner = await _serve(handler, unused_tcp_port)
    try:
        async with S3KVClient(f"http://127.0.0.1:{unused_tcp_port}", timeout=3.0) as kv:
            with pytest.raises(Stop):
                await kv.fetch("ns", [k for k, _ in blocks], slow_then_fails)
            for _ in range(2):
                assert await kv.get_many("ns", [k for k, _ in blocks]) == [d for _, d in blocks]
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("raised", [OSError(28, "No space left on device"),
                                    TimeoutError("the engine's own copy timed out")])
async def test_a_sinks_own_error_is_not_the_gateways(raised: Exception,
                                                     unused_tcp_port: int) -> None:
    """What the caller's sink raises (its disk full, its own timeout) comes out as it is: the
    gateway is not taken for unreachable."""
    async def handler(_request: web.Request) -> web.Response:
        return web.Response(body=records([("a", b"xyz")]), content_type=STREAM)

    async def sink(_i: int, _body: BlockBody | None) -> None:
        raise raised

    runner = await _serve(handler, unused_tcp_port)
    try:
        url = f"http://127.0.0.1:{unused_tcp_port}"
        async with S3KVClient(url) as kv:
            with pytest.raises(type(raised)) as err:
                await kv.fetch("ns", ["a"], sink)
            assert err.value is raised
            assert kv.gateways.is_up(url)
            assert await kv.get_many("ns", ["a"]) == [b"xyz"]
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("status, body, headers, error", [
    (404, b'{"error": "NoSuchBucket", "message": "no namespace ns"}', {}, NamespaceNotFound),
    (503, b'{"error": "SlowDown", "message": "busy"}', {"Retry-After": "soon"}, Backpressure),
])
async def test_a_chunked_error_answer(status: int, body: bytes, headers: dict[str, str],
                                      error: type[Exception], unused_tcp_port: int) -> None:
    """An error answered with a chunked body is the gateway's error (a Retry-After that is not
    a number reads as 1 s), not a malformed stream."""
    runner = await _serve(_streaming([body], status, headers), unused_tcp_port)
    try:
        async with S3KVClient(f"http://127.0.0.1:{unused_tcp_port}") as kv:
            with pytest.raises(error) as err:
                await kv.get_many("ns", ["a"])
            if isinstance(err.value, Backpressure):
                assert err.value.retry_after == 1.0
    finally:
        await runner.cleanup()


async def test_batch_gets_keep_within_the_clients_connections(unused_tcp_port: int) -> None:
    """At most ``connections`` batch gets are in flight to one gateway at once; the rest
    wait for a connection."""
    busy, most = [0], [0]

    async def handler(_request: web.Request) -> web.Response:
        busy[0] += 1
        most[0] = max(most[0], busy[0])
        await asyncio.sleep(0.1)
        busy[0] -= 1
        return web.Response(body=records([("a", b"xyz")]), content_type=STREAM)

    runner = await _serve(handler, unused_tcp_port)
    try:
        async with S3KVClient(f"http://127.0.0.1:{unused_tcp_port}", connections=2) as kv:
            got = await asyncio.gather(*(kv.get_many("ns", ["a"]) for _ in range(6)))
        assert got == [[b"xyz"]] * 6
        assert most[0] == 2
    finally:
        await runner.cleanup()
