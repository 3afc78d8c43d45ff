"""The batch-get stream's parsers without sockets (s3kv/wire/dechunk.py's Dechunker and
s3kv/client_stream.py's RecordLanding): the framing and the record headers parsed wherever the
bytes are cut, into the landings' own space or through their call, as a connection may deliver
them; and the connection paused while the reader falls behind. Over real HTTP:
test_client_stream.py."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
from collections.abc import Callable

import pytest

from s3kv.client_landing import BlockIn
from s3kv.client_stream import AHEAD, END, RecordLanding
from s3kv.frames import block_record
from s3kv.wire.dechunk import ChunkError, Dechunker
from tests.support.streams import chunked, records


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


def _feed(sink: Dechunker | RecordLanding, stream: bytes, ends: list[int],
          in_place: Callable[[], bool]) -> None:
    """``stream`` as a connection would give it, in reads ending at ``ends``: into the sink's
    space when ``in_place()`` says so and it offers some, else through its call."""
    pos = 0
    for end in [*ends, len(stream)]:
        while pos < end:
            space = sink.space() if in_place() else None
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
    stream = chunked(payload, [1, 300, 17, 450], trailer=b"x-trailer: 1\r\n")
    for cut in range(len(stream) + 1):
        inner = _Collect(room=64)
        d = Dechunker(inner)
        _feed(d, stream, [cut], lambda: in_place)
        assert bytes(inner.got) == payload and d.done, cut
    inner = _Collect(room=64)
    _feed(Dechunker(inner), stream, [], lambda: True)
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
        _feed(d, stream, [], lambda: False)


async def _drain(landing: RecordLanding) -> list[bytes | None]:
    """What the landing queued, its blocks' bytes as held (no reader gave a buffer)."""
    out: list[bytes | None] = []
    while (record := await landing.next()) is not END:
        assert record is None or isinstance(record, BlockIn)
        out.append(None if record is None else bytes(record.held))
    return out


async def test_records_every_cut() -> None:
    blocks: list[tuple[str, bytes | None]] = [("a", b"xyz"), ("b", None), ("c", b""),
                                              ("d", os.urandom(700))]
    stream = records(blocks)
    for cut in range(len(stream) + 1):
        for in_place in (False, True):
            landing = RecordLanding([k for k, _ in blocks])
            _feed(landing, stream, [cut], lambda p=in_place: p)
            landing.finish()
            assert await _drain(landing) == [d for _, d in blocks], (cut, in_place)


def test_records_refused() -> None:
    for stream in [records([("a", b"x")]) + b"!", block_record("z", 1) + b"x",
                   b"\xff\xff\xff\x7f"]:
        with pytest.raises(ValueError):
            _feed(RecordLanding(["a"]), stream, [], lambda: False)
    landing = RecordLanding(["a"])
    _feed(landing, block_record("a", 5) + b"xy", [], lambda: False)
    with pytest.raises(ValueError):
        landing.finish()


def test_reading_pauses_while_the_reader_is_behind() -> None:
    calls: list[str] = []
    landing = RecordLanding([str(i) for i in range(6)])
    landing.pace(lambda: calls.append("pause"), lambda: calls.append("resume"))
    for i in range(AHEAD + 1):
        _feed(landing, block_record(str(i), 2) + b"hi", [], lambda: False)
    assert calls == ["pause"]  # AHEAD + 1 blocks came while the reader read none
    landing.done_with()
    assert calls == ["pause", "resume"]


def test_dechunked_records_fuzzed() -> None:
    """A record stream sent in chunks of random sizes and received in random cuts, into the
    landings' space or through their call at random, comes out whole (what a gateway and a
    socket may do between them)."""
    for seed in range(300):
        rnd = random.Random(seed)
        blocks: list[tuple[str, bytes | None]] = [
            (f"k{i}", None if rnd.random() < 0.2 else rnd.randbytes(rnd.choice([0, 1, 7, 300,
                                                                               5000])))
            for i in range(rnd.randint(1, 6))]
        payload = records(blocks)
        sizes, left = [], len(payload)
        while left:
            sizes.append(min(left, rnd.randint(1, 700)))
            left -= sizes[-1]
        stream = chunked(payload, sizes)
        landing = RecordLanding([k for k, _ in blocks])
        d = Dechunker(landing)
        ends = list(itertools.accumulate(rnd.randint(1, 900) for _ in range(len(stream))))
        _feed(d, stream, [e for e in ends if e < len(stream)], lambda r=rnd: r.random() < 0.7)
        assert d.done, seed
        landing.finish()
        got = asyncio.run(_drain(landing))
        assert got == [data for _, data in blocks], seed
