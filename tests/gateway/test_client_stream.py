"""The native client's batch-get stream received in place (s3kv/client_stream.py over
s3kv/wire/dechunk.py and fastget): the framing and the record headers parsed wherever the bytes
are cut, each block's bytes landing in the buffer its reader gives, the connection paused while
the reader falls behind, and a real gateway's batch gets read that way. The parsers are driven
directly with every cut of a stream (what a socket may deliver); the rest runs over real HTTP."""

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
from s3kv.client_stream import AHEAD, END, RecordLanding
from s3kv.errors import BackendUnavailable, RequestError
from s3kv.frames import STREAM, block_record, end_record
from s3kv.wire.dechunk import ChunkError, Dechunker
from tests.gateway.conftest import TOKEN, Gateway

KiB, MiB = 1024, 1024 * 1024


class _Collect:
    """A landing that offers memory only when asked to (``room``), recording what it got."""

    def __init__(self, room: int = 0) -> None:
        self.got = bytearray()
        self.landed_bytes = 0
        self._room = room
        self._buf = bytearray(room)

    def __call__(self, view: memoryview) -> None:
        self.got += view

    def space(self) -> memoryview | None:
        return memoryview(self._buf) if self._room else None

    def landed(self, n: int) -> None:
        self.got += self._buf[:n]
        self.landed_bytes += n


def _chunked(payload: bytes, sizes: list[int], trailer: bytes = b"") -> bytes:
    out, pos = bytearray(), 0
    for size in sizes:
        out += b"%x\r\n" % size + payload[pos:pos + size] + b"\r\n"
        pos += size
    return bytes(out + b"0\r\n" + trailer + b"\r\n")


def _feed(sink: Dechunker | RecordLanding, stream: bytes, cuts: list[int],
          in_place: bool) -> None:
    """``stream`` as a connection would give it, cut at ``cuts``: into the sink's space when
    ``in_place`` and it offers some, else through its call."""
    pos = 0
    for end in [*cuts, len(stream)]:
        while pos < end:
            space = sink.space() if in_place else None
            if space is not None and len(space):
                n = min(len(space), end - pos)
                space[:n] = stream[pos:pos + n]
                sink.landed(n)
            else:
                n = end - pos
                sink(memoryview(stream[pos:end]))
            pos += n


@pytest.mark.parametrize("in_place", [False, True])
def test_dechunker_every_cut(in_place: bool) -> None:
    payload = bytes(range(256)) * 3
    stream = _chunked(payload, [1, 300, 17, 450], trailer=b"x-trailer: 1\r\n")
    for cut in range(len(stream) + 1):
        inner = _Collect(room=64)
        d = Dechunker(inner)
        _feed(d, stream, [cut], in_place)
        assert bytes(inner.got) == payload and d.done, cut
    inner = _Collect(room=64)
    _feed(Dechunker(inner), stream, [], True)
    assert inner.landed_bytes > len(payload) // 2  # the data landed in place, not copied


@pytest.mark.parametrize("stream", [
    b"zz\r\nabc\r\n0\r\n\r\n",                  # not hex
    b"3\r\nabcXY0\r\n\r\n",                     # data not followed by CRLF
    b"-3\r\nabc\r\n0\r\n\r\n",                  # negative
    b"0x3\r\nabc\r\n0\r\n\r\n",                 # a prefix int() would take
    b"1_0\r\n",                                 # an underscore int() would take
    b"3\nabc\r\n0\r\n\r\n",                     # bare LF
    b"0\r\n\r\nmore",                           # bytes after the end
    b"f" * 5000,                                # endless size line
])
def test_dechunker_refuses_bad_framing(stream: bytes) -> None:
    d = Dechunker(_Collect())
    with pytest.raises(ChunkError):
        _feed(d, stream, [], False)


def _records(blocks: list[tuple[str, bytes | None]]) -> bytes:
    out = bytearray()
    for key, data in blocks:
        out += block_record(key, None if data is None else len(data)) + (data or b"")
    return bytes(out + end_record(len(blocks)))


async def _drain_records(landing: RecordLanding) -> list[bytes | None]:
    """What the landing queued, its blocks' bytes as held (no reader gave a buffer)."""
    out: list[bytes | None] = []
    while (record := await landing.next()) is not END:
        assert record is None or isinstance(record, BlockIn)
        out.append(None if record is None else bytes(record.held))
    return out


async def test_records_every_cut() -> None:
    blocks: list[tuple[str, bytes | None]] = [("a", b"xyz"), ("b", None), ("c", b""),
                                              ("d", os.urandom(700))]
    stream = _records(blocks)
    for cut in range(len(stream) + 1):
        for in_place in (False, True):
            landing = RecordLanding([k for k, _ in blocks])
            _feed(landing, stream, [cut], in_place)
            landing.finish()
            assert await _drain_records(landing) == [d for _, d in blocks], (cut, in_place)


def test_records_refused() -> None:
    for stream in [_records([("a", b"x")]) + b"!", block_record("z", 1) + b"x",
                   b"\xff\xff\xff\x7f"]:
        with pytest.raises(ValueError):
            _feed(RecordLanding(["a"]), stream, [], False)
    landing = RecordLanding(["a"])
    _feed(landing, block_record("a", 5) + b"xy", [], False)
    with pytest.raises(ValueError):
        landing.finish()


def test_reading_pauses_while_the_reader_is_behind() -> None:
    calls: list[str] = []
    landing = RecordLanding([str(i) for i in range(6)])
    landing.pace(lambda: calls.append("pause"), lambda: calls.append("resume"))
    for i in range(AHEAD + 1):
        _feed(landing, block_record(str(i), 2) + b"hi", [], False)
    assert calls == ["pause"]  # AHEAD + 1 blocks came while the reader read none
    landing.done_with()
    assert calls == ["pause", "resume"]


async def _serve(handler: Callable[[web.Request], object], port: int) -> web.AppRunner:
    app = web.Application()
    app.router.add_post("/v1/ns/batch-get", handler)  # type: ignore[arg-type]
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


@pytest.mark.parametrize("piece", [7, 257, 4096])
async def test_a_chunked_stream_cut_anywhere(piece: int, unused_tcp_port: int) -> None:
    blocks: list[tuple[str, bytes | None]] = [("a", os.urandom(3 * KiB)), ("b", None),
                                              ("c", os.urandom(50 * KiB))]
    body = _records(blocks)

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": STREAM})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for pos in range(0, len(body), piece):
            await resp.write(body[pos:pos + piece])
        await resp.write_eof()
        return resp

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


async def test_a_connection_paused_for_a_reader_is_not_reused_paused(
        unused_tcp_port: int) -> None:
    """A stream of small blocks can be all in while its reader is still behind (the connection
    paused for it); when that reader then fails, the connection goes on serving the client's
    next batch get instead of waiting for a resume that never comes."""
    blocks = [(str(i), os.urandom(2 * KiB)) for i in range(10)]

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": STREAM})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(_records([(k, d) for k, d in blocks]))
        await resp.write_eof()
        return resp

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


async def test_a_sinks_own_error_is_not_the_gateways(unused_tcp_port: int) -> None:
    """An OSError the caller's sink raises (its disk, say) comes out as it is: the gateway is
    not taken for unreachable."""
    async def handler(_request: web.Request) -> web.Response:
        return web.Response(body=_records([("a", b"xyz")]), content_type=STREAM)

    async def sink(_i: int, _body: BlockBody | None) -> None:
        raise OSError(28, "No space left on device")

    runner = await _serve(handler, unused_tcp_port)
    try:
        url = f"http://127.0.0.1:{unused_tcp_port}"
        async with S3KVClient(url) as kv:
            with pytest.raises(OSError, match="No space left"):
                await kv.fetch("ns", ["a"], sink)
            assert kv.gateways.is_up(url)
            assert await kv.get_many("ns", ["a"]) == [b"xyz"]
    finally:
        await runner.cleanup()
