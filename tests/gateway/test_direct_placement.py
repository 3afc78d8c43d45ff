"""Direct reads place every byte where it belongs: runs of blocks (with gaps between them, some
empty) read from a real HTTP server that sends each response in pieces of random sizes, taken
by readers that read a header first and then give a buffer, read everything at once, or read
nothing; each block's bytes must arrive exactly, a block whose CRC does not match must not be
delivered as read, and a response cut short fails the blocks it did not finish. The checksum
covers the stream, not where the client put the bytes, so this is the test of the placement."""

from __future__ import annotations

import asyncio
import json
import random
import zlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from s3kv.client_direct import MAX_GAP, DirectReads, plan_runs
from s3kv.client_io import BlockBody
from tests.support.localapp import serve_locally

OBJECT = random.Random(7).randbytes(3 << 20)


@pytest.fixture
async def server() -> AsyncIterator[str]:
    """GET /obj with a Range: 206 and the range, written in pieces of random sizes (seeded by
    the range), the connection cut after half the bytes when the query says ``cut``."""

    async def get(request: web.Request) -> web.StreamResponse:
        first, last = (int(x) for x in request.headers["Range"][6:].split("-"))
        body = OBJECT[first:last + 1]
        resp = web.StreamResponse(status=206, headers={"Content-Length": str(len(body))})
        await resp.prepare(request)
        rng = random.Random(first * 31 + last)
        stop = len(body) // 2 if "cut" in request.query else len(body)
        pos = 0
        while pos < stop:
            n = rng.choice([1, 7, 100, 4096, 65536, 300_000, 1 << 20])
            await resp.write(body[pos:min(pos + n, stop)])
            pos += n
        if stop < len(body):
            assert request.transport is not None
            request.transport.close()
        return resp

    app = web.Application()
    app.router.add_get("/obj", get)
    runner, port = await serve_locally(app)
    yield f"http://127.0.0.1:{port}/obj?X-Amz-Signature=x"
    await runner.cleanup()


def _layout(rng: random.Random, n: int) -> list[tuple[int, int]]:
    """``n`` (offset, length) blocks in order through OBJECT, with gaps, some empty."""
    out, at = [], rng.randrange(0, 5000)
    for _ in range(n):
        length = rng.choice([0, 1, 10, 5000, 70_000, 200_000])
        out.append((at, length))
        at += length + rng.choice([0, 0, 1, 4096, 60_000])
    return out


@pytest.mark.parametrize("seed", range(13))
async def test_every_byte_lands_in_its_block(server: str, seed: int) -> None:
    rng = random.Random(seed)
    blocks = _layout(rng, rng.randrange(1, 14))
    bad = rng.randrange(len(blocks)) if seed % 3 == 0 else -1  # a CRC that does not match
    if seed == 12:  # an empty block whose CRC does not match (CRC-32 of nothing is 0)
        blocks[0], bad = (blocks[0][0], 0), 0
    doc = {"expires": 0, "urls": [server + ("&cut=1" if seed % 4 == 1 else "")],
           "blocks": [[0, off, n, zlib.crc32(OBJECT[off:off + n]) ^ (i == bad)]
                      for i, (off, n) in enumerate(blocks)]}
    styles = [rng.choice(["header", "whole", "none", "into"]) for _ in blocks]
    got: dict[int, bytes] = {}

    async def sink(i: int, body: BlockBody | None) -> None:
        assert body is not None and body.length == blocks[i][1]
        style = styles[i]
        if style == "whole":
            got[i] = await body.readexactly(body.length)
        elif style in ("header", "into"):
            head = await body.readexactly(min(3, body.length)) if style == "header" else b""
            buf = bytearray(body.remaining)
            await body.readinto(memoryview(buf))
            got[i] = head + bytes(buf)

    async def locate() -> bytes:
        return json.dumps(doc).encode()

    reads = DirectReads(timeout=30.0)
    done = [False] * len(blocks)
    try:
        left = await reads.fetch("http://gw", list(range(len(blocks))), locate, sink, done)
    finally:
        reads.close()
    cut = seed % 4 == 1
    for i, (off, n) in enumerate(blocks):
        want = OBJECT[off:off + n]
        if done[i]:
            assert i not in left and i != bad
            if styles[i] != "none":
                assert got[i] == want, (seed, i, styles[i])
        else:
            assert i in left
            assert i == bad or cut, (seed, i)
    if not cut:
        assert sorted(left) == ([bad] if bad >= 0 else [])
    assert not set(left) & {i for i, d in enumerate(done) if d}
    await asyncio.sleep(0)


def test_runs_are_large_but_at_least_in_flight_when_there_is_enough() -> None:
    """A restore's located bytes over IN_FLIGHT per ranged GET, 32-256 MiB: fewer, larger GETs
    cost the object store less per byte, and a restore inside one segment still keeps
    IN_FLIGHT of them busy; neighbours only (a gap over MAX_GAP, or another segment, splits)."""
    mib = 1 << 20

    def doc(blocks: list[tuple[int, int, int]]) -> dict[str, object]:
        return {"urls": [f"u{i}" for i in range(8)],
                "blocks": [[u, off, n, 0] for u, off, n in blocks]}

    # a session of 40 chunks of 32 MiB + 4 KiB, 7 to a 256 MiB segment: runs of up to an
    # eighth of it (5 chunks), so 5 + 2 per full segment and the last 5
    chunk = 32 * mib + 4096
    session = [(i // 7, (i % 7) * chunk, chunk) for i in range(40)]
    runs, via, missing = plan_runs(doc(session), list(range(40)))
    assert not via and not missing
    assert [len(r.members) for r in runs] == [5, 2] * 5 + [5]
    assert all(r.end - r.start <= 40 * chunk // 8 for r in runs)
    assert sorted(p for r in runs for p, *_ in r.members) == list(range(40))
    # 64 MiB inside one segment: 8 runs of 8 MiB would be too small: runs of up to 32 MiB
    small = [(0, i * mib, mib) for i in range(64)]
    runs, _, _ = plan_runs(doc(small), list(range(64)))
    assert [r.end - r.start for r in runs] == [32 * mib, 32 * mib]
    # a gap over MAX_GAP splits, so does another segment; "gateway" and null pass through
    split = plan_runs({"urls": ["a", "b"], "blocks": [[0, 0, 10, 0], [0, 10 + MAX_GAP + 1, 10, 0],
                                                     [1, 20, 10, 0], "gateway", None]},
                      [5, 6, 7, 8, 9])
    assert [[p for p, *_ in r.members] for r in split[0]] == [[5], [6], [7]]
    assert split[1:] == ([8], [9])
