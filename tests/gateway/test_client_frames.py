"""The native client's batch-get stream reader (s3kv/frames.py) against a real HTTP server that
sends well-formed and broken record streams (a gateway cannot be made to send broken ones, so a
tiny aiohttp app stands in for it)."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from s3kv.client import S3KVClient
from s3kv.client_io import FramedPayload, framed_parts
from s3kv.errors import RequestError
from s3kv.frames import STREAM, block_record, decode_frames, end_record
from s3kv.wire.body import SLICE

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _raw(doc: object) -> bytes:
    head = json.dumps(doc).encode()
    return struct.pack("<I", len(head)) + head


@asynccontextmanager
async def _serving(handler: Handler, port: int, **client: Any) -> AsyncIterator[S3KVClient]:
    """``handler`` answering the batch gets of namespace ``ns`` on ``port`` while in the block,
    and a client of it."""
    app = web.Application()
    app.router.add_post("/v1/ns/batch-get", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with S3KVClient(f"http://127.0.0.1:{port}", **client) as kv:
            yield kv
    finally:
        await runner.cleanup()


def _a_then(event: asyncio.Event, rest: bytes) -> Handler:
    """A handler streaming block "a" (``xyz``), then, once ``event`` is set, ``rest``."""
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": STREAM})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(block_record("a", 3) + b"xyz")
        await asyncio.wait_for(event.wait(), 30)
        await resp.write(rest)
        await resp.write_eof()
        return resp

    return handler


GOOD = (block_record("a", 3) + b"xyz" + block_record("b", None) + block_record("c", None)
        + end_record(3))


@pytest.mark.parametrize("body, ok", [
    (GOOD, True),
    (block_record("a", 5) + b"xyz", False),                          # truncated block
    (block_record("a", 3) + b"xyz", False),                          # no end record
    (block_record("a", 3) + b"xyz" + end_record(2), False),          # end counts 2, 1 sent
    (block_record("z", 3) + b"xyz" + end_record(1), False),          # not the key asked
    (end_record(0), False),                                          # no record for "a"
    (GOOD + b"!", False),                                            # bytes after the end
    (struct.pack("<I", 99) + b"{}", False),                          # truncated header
    (struct.pack("<I", 1 << 30), False),                             # absurd header length
    (_raw({"key": "a"}) + end_record(1), False),                     # no length
    (_raw({"key": "a", "length": -1}) + end_record(1), False),       # negative length
    (_raw(["not", "an", "object"]), False),
])
async def test_batch_get_stream(body: bytes, ok: bool, unused_tcp_port: int) -> None:
    async def handler(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=STREAM)

    async with _serving(handler, unused_tcp_port) as kv:
        if ok:
            assert await kv.get_many("ns", ["a", "b", "c"]) == [b"xyz", None, None]
            assert [kb async for kb in kv.iter_many("ns", ["a", "b", "c"])] == [
                ("a", b"xyz"), ("b", None), ("c", None)]
        else:
            with pytest.raises(RequestError) as err:
                await kv.get_many("ns", ["a"])
            assert err.value.code == "MalformedFrames"
            with pytest.raises(RequestError) as err:
                [kb async for kb in kv.iter_many("ns", ["a"])]
            assert err.value.code == "MalformedFrames"


async def test_blocks_arrive_before_the_stream_ends(unused_tcp_port: int) -> None:
    """iter_many hands out a block as soon as its record is in, not when the response ends."""
    first_seen = asyncio.Event()  # the client has "a" before "b" is sent
    handler = _a_then(first_seen, block_record("b", 2) + b"hi" + end_record(2))

    async with _serving(handler, unused_tcp_port) as kv:
        got = []
        async for key, block in kv.iter_many("ns", ["a", "b"]):
            got.append((key, block))
            first_seen.set()
        assert got == [("a", b"xyz"), ("b", b"hi")]


async def test_a_reader_that_stops_early_stops_the_stream(unused_tcp_port: int) -> None:
    """iter_many left after its first block ends the batch get (its connection closed, not
    kept waiting for a reader that is gone); the client's next batch get works."""
    hung_up = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": STREAM})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        keys = (await request.json())["keys"]
        try:
            for key in keys:
                await resp.write(block_record(key, 1 << 20) + bytes(1 << 20))
            await resp.write(end_record(len(keys)))
        except (ConnectionError, asyncio.CancelledError):
            hung_up.set()
            raise
        await resp.write_eof()
        return resp

    async with _serving(handler, unused_tcp_port, timeout=20) as kv:
        many = [f"k{i}" for i in range(64)]  # 64 MiB: more than the sockets hold
        async with aclosing(kv.iter_many("ns", many)) as blocks:
            async for key, block in blocks:
                assert key == "k0" and block == bytes(1 << 20)
                break
        await asyncio.wait_for(hung_up.wait(), 10)
        assert await kv.get_many("ns", ["x"]) == [bytes(1 << 20)]


async def test_a_reader_cancelled_while_it_waits_leaves_no_task(unused_tcp_port: int) -> None:
    """iter_many cancelled (a timeout) while it waits for the next block leaves nothing of it
    running: neither the batch get nor its wait for the next block."""
    release = asyncio.Event()  # "b" does not come while the test runs
    handler = _a_then(release, b"")

    async with _serving(handler, unused_tcp_port) as kv:
        got = []
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.0):
                async for key, block in kv.iter_many("ns", ["a", "b"]):
                    got.append((key, block))
        assert got == [("a", b"xyz")]
        mine = [t for t in asyncio.all_tasks() if "Queue.get" in t.get_coro().__qualname__
                or "_fetch_part" in t.get_coro().__qualname__]
        assert not mine
        release.set()


async def test_a_framed_body_goes_out_in_slices() -> None:
    """A batch put's body is written as views of at most SLICE bytes: a whole 32 MiB block
    handed to one write() has the transport copy all the socket did not take at once."""
    big = memoryview(bytearray(range(256)) * (12 * 1024 * 4))  # 12 MiB
    items = [("a", b"xyz"), ("big", big), ("hb", (b"head", big[:5 * SLICE // 2]))]
    writes: list[bytes] = []

    class Recorder:  # the writer aiohttp would pass (records what it is given)
        async def write(self, chunk: bytes | memoryview) -> None:
            writes.append(bytes(chunk))

    await FramedPayload(framed_parts(items)).write(Recorder())
    assert max(map(len, writes)) <= SLICE
    decoded = decode_frames([b"".join(writes)])
    assert [(k, b"".join(v)) for k, v in decoded] == [
        ("a", b"xyz"), ("big", bytes(big)), ("hb", b"head" + bytes(big[:5 * SLICE // 2]))]
