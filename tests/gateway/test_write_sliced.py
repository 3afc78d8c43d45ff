"""How a large GET body goes out (``s3_objects.write_sliced``): in views of at most SLICE
bytes of the body's own buffers, never joined."""

from __future__ import annotations

import asyncio
import os
from typing import Any, cast

from aiohttp import web

from s3kv.gateway.s3_objects import write_sliced
from s3kv.wire.body import SLICE


class Recorder:
    def __init__(self) -> None:
        self.objects: list[Any] = []

    async def write(self, data: Any) -> None:
        self.objects.append(data)


def test_a_large_body_goes_out_in_slices_of_its_own_buffers() -> None:
    pieces = [os.urandom(SLICE - 10), os.urandom(SLICE + 7)]
    rec = Recorder()
    asyncio.run(write_sliced(cast(web.StreamResponse, rec), pieces))
    assert all(len(w) <= SLICE for w in rec.objects)
    assert b"".join(bytes(w) for w in rec.objects) == b"".join(pieces)
    assert {id(memoryview(w).obj) for w in rec.objects} == {id(p) for p in pieces}  # no copy
