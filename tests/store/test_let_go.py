"""On the file backend the writer lets go of a part's bytes once it is stored (they are in the
upload's file), and reads of them come back from there: before, during and after the seal."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from s3kv.backends import FileBackend
from s3kv.sizes import KiB, MiB
from s3kv.wire.body import pieces_of
from tests.store.helpers import block, open_store

#: a segment of five parts: the upload starts once a second part is queued
PART = 4 * MiB
SEG = 20 * MiB


async def wait_for(cond: Callable[[], bool]) -> None:
    for _ in range(1000):  # 10 s: a part write on tmpfs takes milliseconds
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_stored_parts_are_let_go_and_read_back(tmp_path: Path) -> None:
    backend = await FileBackend(tmp_path).open()
    # a long seal_after: the segment stays open while the first part is stored
    store = await open_store(backend, seal_after=30.0, max_block_size=1 * MiB,
                             segment_size=SEG, part_size=PART)
    try:
        await store.create_namespace("kvns")
        blocks = {f"k{i}".encode(): block(i, 256 * KiB) for i in range(40)}  # 10 MiB, 3 parts
        for key, data in blocks.items():
            await store.put("kvns", key, data)
        writer = store.writer
        nid = store.ns_id("kvns")
        loc, loc2 = store.index.get(nid, b"k0"), store.index.get(nid, b"k20")  # parts 1, 2
        assert loc is not None and loc2 is not None and loc2.offset >= PART
        await wait_for(lambda: writer.read(loc.segment, loc.offset, loc.length) is None
                       and writer.read(loc2.segment, loc2.offset, loc2.length) is None)
        assert writer.holds(loc.segment)  # still open, its stored parts not held
        assert writer.memory_bytes() < 3 * MiB  # the part being filled (2 MiB of it)
        for key, data in blocks.items():  # held or let go, every block reads back whole
            assert await store.get("kvns", key) == data
            pieces = await store.read("kvns", key)
            assert pieces is not None and b"".join(pieces_of(pieces)) == data
        back = await writer.read_back(loc.segment, loc.offset, loc.length)
        assert back is not None and b"".join(back) == blocks[b"k0"]
        await store.flush()
        assert await writer.read_back(loc.segment, loc.offset, loc.length) is None  # let go
        for key, data in blocks.items():
            assert await store.get("kvns", key) == data
    finally:
        await store.close()


async def test_read_back_finds_a_just_completed_upload(tmp_path: Path) -> None:
    """The upload's file is renamed to the segment object on completion, while the writer
    still holds the segment (its sidecar is being written): a read back then reads the
    object."""
    backend = await FileBackend(tmp_path).open()
    store = await open_store(backend, seal_after=30.0, max_block_size=1 * MiB,
                             segment_size=SEG, part_size=PART)
    try:
        await store.create_namespace("kvns")
        data = block(1, 1 * MiB)
        for i in range(10):
            await store.put("kvns", f"k{i}".encode(), data)
        writer = store.writer
        loc = store.index.get(store.ns_id("kvns"), b"k0")
        assert loc is not None
        await wait_for(lambda: writer.read(loc.segment, loc.offset, loc.length) is None)
        (upload,) = await backend.list_multipart_uploads("")
        upload_file = tmp_path / ".uploads" / upload.upload_id / "data"
        segment_file = tmp_path / upload.key
        segment_file.parent.mkdir(parents=True, exist_ok=True)
        upload_file.rename(segment_file)  # as _complete does
        try:
            back = await writer.read_back(loc.segment, loc.offset, loc.length)
            assert back is not None and b"".join(back) == data
        finally:
            segment_file.rename(upload_file)
    finally:
        await store.close()


async def test_a_block_across_a_stored_part_and_a_held_one(tmp_path: Path) -> None:
    """768 KiB blocks: block 10 spans bytes 7.5-8.25 MiB, across the end of part 2 (stored
    and let go of) into part 3 (the part being filled, in memory). Its bytes come from both;
    reading it all from the upload's file would read bytes not written yet."""
    backend = await FileBackend(tmp_path).open()
    store = await open_store(backend, seal_after=30.0, max_block_size=1 * MiB,
                             segment_size=SEG, part_size=PART)
    try:
        await store.create_namespace("kvns")
        blocks = {f"k{i}".encode(): block(i, 768 * KiB) for i in range(14)}
        for key, data in blocks.items():
            await store.put("kvns", key, data)
        writer = store.writer
        loc = store.index.get(store.ns_id("kvns"), b"k10")
        assert loc is not None and loc.offset < 2 * PART < loc.offset + loc.length
        await wait_for(lambda: writer.memory_bytes() < 3 * MiB)  # parts 1 and 2 let go of
        back = await writer.read_back(loc.segment, loc.offset, loc.length)
        assert back is not None and len(back) >= 2  # from the file, and from memory
        assert b"".join(back) == blocks[b"k10"]
        for key, data in blocks.items():
            assert await store.get("kvns", key) == data
    finally:
        await store.close()
