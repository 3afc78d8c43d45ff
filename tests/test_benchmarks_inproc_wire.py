"""benchmarks/inproc_wire.py's Wire, the in-process benchmark's stand-in for a socket: however
an answer is cut into writes, it reports the status and body size once the answer is complete,
and not before."""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.inproc_wire import Wire

_PLAIN = b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\nETag: \"x\"\r\n\r\n" + b"b" * 300
_CHUNKED = (b"HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n")


def _cut(raw: bytes, cuts: list[int]) -> list[bytes | memoryview]:
    points = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
    return [memoryview(raw)[a:b] if i % 2 else raw[a:b]
            for i, (a, b) in enumerate(itertools.pairwise(points))]


async def _feed(raw: bytes, cuts: list[int]) -> list[tuple[int, int] | None]:
    wire = Wire()
    done = wire.expect()
    seen: list[tuple[int, int] | None] = []
    for piece in _cut(raw, cuts):
        seen.append(done.result() if done.done() else None)
        wire.write(piece)
    seen.append(done.result() if done.done() else None)
    return seen


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=6))
def test_any_cut_of_an_answer_gives_its_status_and_size_when_complete(cuts: list[int]) -> None:
    for raw, want in ((_PLAIN, (200, 300)), (_CHUNKED, (206, len(_CHUNKED) - 60))):
        seen = asyncio.run(_feed(raw, cuts))
        assert seen[-1] == want
        assert all(s is None for s in seen[:-1])  # not complete before its last byte
