"""A body's digests (s3kv/gateway/digests.py) are the same however the body is cut into pieces
and whether a batch is hashed on the loop or in a worker thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import itertools
import zlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from s3kv.gateway.checksums import new_checksum
from s3kv.gateway.digests import BodyDigests


@settings(max_examples=40, deadline=None)
@given(body=st.binary(max_size=5000), cuts=st.lists(st.integers(0, 5000), max_size=8),
       offload=st.sampled_from([1, 64, 1000, 1 << 30]))
def test_digests_do_not_depend_on_the_pieces_or_the_thread(body: bytes, cuts: list[int],
                                                            offload: int) -> None:
    async def run() -> tuple[bytes, bytes]:
        md5, crc = hashlib.md5(), new_checksum("crc32")
        digests = BodyDigests([md5, crc, crc], offload)  # one object in two roles: once
        at = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
        for lo, hi in itertools.pairwise(at):
            await digests.feed(memoryview(body)[lo:hi])
        await digests.finish()
        return md5.digest(), crc.digest()

    md5, crc = asyncio.run(run())
    assert md5 == hashlib.md5(body).digest()
    assert int.from_bytes(crc, "big") == zlib.crc32(body)


class _NoThreads(concurrent.futures.ThreadPoolExecutor):
    def submit(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a cheap digest was handed to a worker thread")


@settings(max_examples=20, deadline=None)
@given(body=st.binary(max_size=5000), cuts=st.lists(st.integers(0, 5000), max_size=8))
def test_crc_only_digests_are_hashed_on_the_loop_as_pieces_arrive(body: bytes,
                                                                  cuts: list[int]) -> None:
    async def run() -> bytes:
        asyncio.get_running_loop().set_default_executor(_NoThreads())
        crc = new_checksum("crc32")
        digests = BodyDigests([crc], offload_bytes=1)  # would spill every piece otherwise
        at = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
        for lo, hi in itertools.pairwise(at):
            assert not digests.add(memoryview(body)[lo:hi])
        await digests.finish()
        return crc.digest()

    assert int.from_bytes(asyncio.run(run()), "big") == zlib.crc32(body)
