"""Blocks received straight into the open segment (store/landing.py) on the file backend: a
batch's blocks get aligned rooms one after another, adjacent ones received as one span, a
batch that does not fit the open segment lands in two; committed blocks read back and are
indexed; given-up blocks leave nothing behind and do not hold their segment's seal; what
does not land (small blocks, a codec) says so; and the blocks' checksums, worked out from the
spans' bytes as they arrive, are each block's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from s3kv.backends import FileBackend
from s3kv.errors import TooLarge
from s3kv.sizes import KiB, MiB
from s3kv.store import layout
from s3kv.store.blocksums import BlockSums
from s3kv.store.codecs import parse_codec_spec
from s3kv.store.landing import Landing
from s3kv.store.store import BlockStore
from tests.store.helpers import open_store

NS = "landing"


async def _store(tmp_path: Path, **over: object) -> BlockStore:
    store = await open_store(await FileBackend(tmp_path, fsync=False).open(), **over)
    await store.create_namespace(NS)
    return store


async def _read(store: BlockStore, key: bytes) -> bytes | None:
    block = await store.get(NS, key)
    return None if block is None else bytes(block)


def _fill(landing: Landing, blobs: list[bytes]) -> None:
    """Write the blocks into the spans as a body's reads would."""
    body = memoryview(b"".join(blobs))
    for span in landing.spans():
        span[:] = body[:len(span)]
        body = body[len(span):]
    assert not body


async def test_a_batch_lands_in_aligned_rooms_and_reads_back(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    sizes = [512 * KiB, 512 * KiB, 100 * KiB + 1, 256 * KiB, 0]
    blobs = [os.urandom(n) for n in sizes]
    keys = [f"k{i}".encode() for i in range(len(sizes))]
    landing = await store.land(NS, list(zip(keys, sizes, strict=True)))
    assert landing is not None
    offsets = [room.offset - landing.rooms[0].offset for room in landing.rooms]
    assert offsets[:4] == [0, 512 * KiB, 1024 * KiB, 1128 * KiB]  # the 4th after a gap
    # the first three are one run of bytes, the fourth after the gap; the empty one nothing
    assert [len(s) for s in landing.spans()] == [1124 * KiB + 1, 256 * KiB]
    _fill(landing, blobs)
    metas = store.landed(landing, [layout.checksum(b) for b in blobs])
    assert [m.key for m in metas] == keys and store.stats.blocks_landed == len(keys)
    for key, blob in zip(keys, blobs, strict=True):  # from the open segment
        assert await _read(store, key) == blob
    await store.flush()
    for key, blob in zip(keys, blobs, strict=True):  # from the sealed segment's file
        assert await _read(store, key) == blob
    await store.close()


async def test_a_batch_that_does_not_fit_lands_in_two_segments(tmp_path: Path) -> None:
    store = await _store(tmp_path, segment_size=4 * MiB, part_size=1 * MiB,
                         max_block_size=1 * MiB)
    blobs = [os.urandom(1 * MiB) for _ in range(6)]
    keys = [f"b{i}".encode() for i in range(6)]
    landing = await store.land(NS, [(k, len(b)) for k, b in zip(keys, blobs, strict=True)])
    assert landing is not None
    segments = [room.segment for room in landing.rooms]
    assert segments[0] is not segments[-1] and len(landing.spans()) == 2
    _fill(landing, blobs)
    store.landed(landing, [layout.checksum(b) for b in blobs])
    await store.flush()
    for key, blob in zip(keys, blobs, strict=True):
        assert await _read(store, key) == blob
    await store.close()


async def test_given_up_blocks_leave_nothing_and_do_not_hold_the_seal(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    landing = await store.land(NS, [(b"gone", 2 * MiB), (b"also", 64 * KiB)])
    assert landing is not None
    landing.abandon()
    landing.abandon()  # a second time changes nothing
    await store.flush()  # returns: nothing holds the segment open
    assert await store.get(NS, b"gone") is None and await store.get(NS, b"also") is None
    assert store.stats.blocks_landed == 0
    await store.close()


async def test_what_does_not_land(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    assert await store.land(NS, [(b"small", 1 * MiB - 1)]) is None  # under LAND_MIN
    assert await store.land(NS, [(b"a", 2 * MiB), (b"b", 64 * KiB - 1)]) is None  # a small block
    zstd = parse_codec_spec("zstd")
    assert await store.land(NS, [(b"z", 2 * MiB)], codec=zstd) is None  # a codec's output
    await store.close()


async def test_a_landing_s_sums_are_its_blocks_in_span_order(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    sizes = [1 * MiB, 100 * KiB + 1, 0, 256 * KiB]
    blobs = [os.urandom(n) for n in sizes]
    landing = await store.land(NS, [(f"s{i}".encode(), n) for i, n in enumerate(sizes)])
    assert landing is not None and len(landing.spans()) == 2  # an aligned gap between them
    sums = BlockSums(landing.lengths())
    _fill(landing, blobs)
    for span in landing.spans():
        sums.feed(span)
    assert sums.values() == [layout.checksum(b) for b in blobs]
    landing.abandon()
    await store.close()


async def test_room_taken_at_once_only_when_nothing_needs_a_wait(tmp_path: Path) -> None:
    """``land_now`` (a plain PUT's, from the event loop's callback): None, holding nothing, when
    no segment is open or while the writer's lock is held (a window not ready yet:
    test_fileuploads.py); else the same rooms ``land`` gives, read back once committed."""
    store = await _store(tmp_path)
    one = [(b"now", 256 * KiB)]
    assert store.land_now(NS, one, least=64 * KiB) is None  # no open segment yet
    first = await store.land(NS, [(b"first", 256 * KiB)], least=64 * KiB)  # opens one
    assert first is not None
    _fill(first, [blob := os.urandom(256 * KiB)])
    store.landed(first, [layout.checksum(blob)])
    seg = first.rooms[0].segment
    size, landing_before = seg.size, seg.landing
    async with store.writer.lock:  # a batch taking room, or an append
        assert store.land_now(NS, one, least=64 * KiB) is None
    with pytest.raises(TooLarge):  # refused as land refuses it
        store.land_now(NS, [(b"big", 3 * MiB)], least=64 * KiB)
    assert (seg.size, seg.landing) == (size, landing_before)  # nothing taken
    assert store.land_now(NS, [(b"small", 1000)], least=64 * KiB) is None  # too small to land
    landing = store.land_now(NS, one, least=64 * KiB)
    assert landing is not None and landing.rooms[0].segment is seg
    _fill(landing, [data := os.urandom(256 * KiB)])
    store.landed(landing, [layout.checksum(data)])
    assert await _read(store, b"now") == data
    await store.flush()
    assert await _read(store, b"now") == data and await _read(store, b"first") == blob
    await store.close()
