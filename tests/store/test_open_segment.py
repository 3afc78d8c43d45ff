"""The open segment keeps a block's immutable pieces by reference, cut at part boundaries, and
reads any range back across pieces and parts."""

from __future__ import annotations

import asyncio
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from s3kv.backends import FileBackend
from s3kv.backends.multipart import MultipartUpload
from s3kv.retry import RetryPolicy
from s3kv.store.open_segment import OpenSegment
from s3kv.store.segments import SegmentState, SegmentTable

PART = 4096


def new_segment() -> OpenSegment:
    info = SegmentTable().add("node/seg", SegmentState.OPEN)
    # never started: these tests only fill the segment (the backend is not touched)
    upload = MultipartUpload(FileBackend("/nonexistent"), "k", PART, RetryPolicy(),
                             asyncio.Semaphore(1))
    return OpenSegment(info, PART, upload)


async def test_pieces_are_kept_by_reference_and_cut_at_part_boundaries() -> None:
    seg = new_segment()
    a, b = os.urandom(3000), os.urandom(3000)
    assert seg.append([a, b], 1) == 0
    assert seg.size == 6000 and len(seg.parts) == 1
    part = seg.parts[0]
    assert [len(p) for p in part] == [3000, 1096]
    assert all(p.obj is x for p, x in zip(part, (a, b), strict=True))  # no copy
    assert seg.queue.get_nowait() == part  # a full part is queued as it fills
    seg.finish_last_part()
    assert [len(p) for p in seg.parts[1]] == [1904]
    assert b"".join(seg.read(2990, 20)) == (a + b)[2990:3010]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 3 * PART), min_size=1, max_size=8),
       align=st.sampled_from([1, 512, PART]), data=st.data())
def test_any_range_reads_back(sizes: list[int], align: int, data: st.DataObject) -> None:
    async def run() -> None:
        seg = new_segment()
        expect = bytearray()
        for size in sizes:
            block = os.urandom(size)
            cut = data.draw(st.integers(0, size))
            pad = (-len(expect)) % align
            expect += bytes(pad)
            assert seg.append([block[:cut], block[cut:]], align) == len(expect)
            expect += block
        start = data.draw(st.integers(0, len(expect) - 1))
        length = data.draw(st.integers(0, len(expect) - start))
        assert b"".join(seg.read(start, length)) == bytes(expect[start:start + length])
    asyncio.run(run())


async def test_land_gives_each_block_its_room_and_zeroes_the_gaps() -> None:
    seg = new_segment()
    seg.append([b"x" * 100], 1)
    seg.pad(28)  # the run starts at an aligned end, as the writer reserves it
    window = memoryview(bytearray(b"\xff" * 1000))  # what a recycled file held
    rooms = seg.land(window, [(b"a", 128, 300), (b"b", 512, 200), (b"c", 712, 0),
                              (b"d", 768, 360)])
    assert [(r.key, r.offset, len(r.window), r.run_start) for r in rooms] == [
        (b"a", 128, 300, 128), (b"b", 512, 200, 128), (b"c", 712, 0, 128),
        (b"d", 768, 360, 128)]
    assert all(r.run is window and r.segment is seg for r in rooms)
    for r in rooms:
        r.window[:] = bytes([r.key[0]]) * len(r.window)
    assert seg.size == 1128
    got = b"".join(seg.read(128, 1000))
    assert got == b"a" * 300 + bytes(84) + b"b" * 200 + bytes(56) + b"d" * 360
