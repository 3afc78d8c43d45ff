"""How a response body goes out (``s3_objects.write_sliced``): a record head and a small block
in one write (one send, one chunk); a larger block's head alone, then the block (its pieces
joined up to SLICE, a single buffer as it is), a large one in views of at most SLICE bytes."""

from __future__ import annotations

import asyncio
import os
from typing import Any, cast

from aiohttp import web

from s3kv.gateway.s3_objects import JOIN_MAX, write_sliced
from s3kv.wire.body import SLICE


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.objects: list[Any] = []

    async def write(self, data: Any) -> None:
        self.writes.append(bytes(data))
        self.objects.append(data)


def written(head: bytes, pieces: list[bytes]) -> list[bytes]:
    rec = Recorder()
    asyncio.run(write_sliced(cast(web.StreamResponse, rec), pieces, head=head))
    return rec.writes


def test_a_small_block_goes_out_with_its_head_in_one_write() -> None:
    pieces = [os.urandom(n) for n in (16384, 16384, 1000)]
    assert written(b"HEAD", pieces) == [b"HEAD" + b"".join(pieces)]
    assert written(b"", [pieces[0]]) == [pieces[0]]


def test_a_larger_block_is_not_copied_to_join_its_head() -> None:
    block = os.urandom(JOIN_MAX + 1)
    rec = Recorder()
    asyncio.run(write_sliced(cast(web.StreamResponse, rec), [block], head=b"HEAD"))
    assert rec.writes == [b"HEAD", block]
    assert memoryview(rec.objects[1]).obj is block  # a view of the block itself, no copy
    pieces = [os.urandom(n) for n in (65536, 65536, 1000)]  # pieces up to SLICE: one write
    assert written(b"HEAD", pieces) == [b"HEAD", b"".join(pieces)]


def test_a_large_block_goes_out_in_slices_after_its_head() -> None:
    pieces = [os.urandom(SLICE - 10), os.urandom(SLICE + 7)]
    writes = written(b"HEAD", pieces)
    assert writes[0] == b"HEAD" and all(len(w) <= SLICE for w in writes)
    assert b"".join(writes[1:]) == b"".join(pieces)
