"""Blocks in the bucket that the store did not write as they are: a block whose entry's
checksum matches its bytes (another tool wrote both) but whose codec header lies is a miss,
found before it is decoded; its decoding takes no more memory than its entry says, and no
more time than a block's."""

from __future__ import annotations

import asyncio
import resource
import time

import numpy as np
import zstandard
from structlog.testing import capture_logs

from s3kv.backends.base import Backend
from s3kv.store import layout
from s3kv.store.codecs import ZSTD_ID, kvq_format, zstd
from s3kv.store.segments import segment_key, sidecar_key
from tests.store.helpers import open_store

#: the name of the segment another tool wrote under the store's prefix
FOREIGN = "foreign/000000000001-00000001"


def zstd_block(frame: bytes, raw_len: int) -> bytes:
    """A zstd codec block around ``frame`` whose header (checksums right) says ``raw_len``."""
    head = zstd.HEADER.pack(zstd.MAGIC, zstd.VERSION, 0, 3, 0, raw_len,
                            layout.checksum(frame), 0)
    return head[:-4] + layout.checksum(head[:-4]).to_bytes(4, "little") + frame


def zero_frame(size: int) -> bytes:
    """A zstd frame of ``size`` zero bytes that declares its size (a few KiB per GiB)."""
    cobj = zstandard.ZstdCompressor(level=3, write_content_size=True).compressobj(size=size)
    chunk, out = bytes(16 << 20), []
    for _ in range(size // len(chunk)):
        out.append(cobj.compress(chunk))
    out.append(cobj.flush())
    return b"".join(out)


async def write_segment(backend: Backend, namespace: str, key: bytes, block: bytes,
                        raw_length: int, codec: int) -> None:
    """One short segment holding ``block`` at 0 under ``key``, its entry's CRC-32 that of
    the block's bytes, and its sidecar: as the store lays one out (docs/format.md)."""
    entry = layout.Entry(namespace, key, 0, len(block), raw_length, layout.checksum(block),
                         codec, time.time())
    manifest = layout.Manifest(FOREIGN, time.time(), 0, [entry])
    size = len(block) + len(manifest.encode()) + layout.TRAILER_SIZE
    manifest.segment_length = size
    body = manifest.encode()
    seg = block + body + layout.encode_trailer(len(block), body)
    assert len(seg) == size
    await backend.put_object(segment_key("", FOREIGN), seg)
    await backend.put_object(sidecar_key("", FOREIGN), body)


async def test_zstd_frame_claiming_a_gigabyte_is_a_miss_without_the_memory(
        backend: Backend) -> None:
    """Before: zstandard allocated what the frame declared (1 GiB here, up to the header's
    1 TiB limit), whatever ``max_output_size`` said, and only then was the block found longer
    than its 5000-byte entry; now the header's length is checked against the entry's first."""
    store = await open_store(backend)
    await store.create_namespace("packed", "zstd")
    await store.close()
    bomb = zstd_block(zero_frame(1 << 30), 1 << 30)
    assert len(bomb) < 64 << 10
    await write_segment(backend, "packed", b"k", bomb, 5000, ZSTD_ID)
    store = await open_store(backend)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
        with capture_logs() as logs:
            assert await store.get("packed", b"k") is None
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grew < 256 << 10, f"peak memory grew {grew >> 10} MiB decoding one block"
        corrupt = [e for e in logs if e["event"] == "block.corrupt"]
        assert len(corrupt) == 1 and "the entry 5000" in corrupt[0]["problem"]
        assert store.stats.checksum_failures == 1
        assert store.head("packed", b"k") is None  # forgotten
    finally:
        await store.close()


async def replace_block(backend: Backend, name: str, key: bytes, stored: bytes) -> None:
    """Another tool's edit of segment ``name``: ``key``'s block (same length) replaced by
    ``stored``, its entry's CRC-32 made right in the footer, the trailer and the sidecar."""
    seg = bytearray(await backend.get_object(segment_key("", name)))
    moff, mlen, _ = layout.decode_trailer(bytes(seg[-layout.TRAILER_SIZE:]))
    manifest = layout.Manifest.decode(bytes(seg[moff:moff + mlen]))
    (i, e), = [(i, e) for i, e in enumerate(manifest.entries) if e.key == key]
    assert len(stored) == e.length
    seg[e.offset:e.offset + e.length] = stored
    manifest.entries[i] = e._replace(crc=layout.checksum(stored))
    body = manifest.encode()
    seg[moff:] = body + layout.encode_trailer(moff, body)
    await backend.put_object(segment_key("", name), bytes(seg))
    await backend.put_object(sidecar_key("", name), body)


def kvq_with_segment_channels(block: bytes, channels: int) -> bytes:
    """A kvq block whose segment table gives its first segment ``channels``, its header's
    checksums made right (docs/codecs.md: the table follows the channel order, if any)."""
    out = bytearray(block)
    head_dim = int.from_bytes(out[6:8], "little")
    at = kvq_format.HEADER.size
    if out[10] & kvq_format.FLAG_PERMUTED:
        at += head_dim * (1 if head_dim <= 256 else 2)
    out[at:at + 2] = channels.to_bytes(2, "little")
    head = kvq_format.HEADER.size
    payload = bytes(out[head:])
    out[40:44] = layout.checksum(payload).to_bytes(4, "little")
    out[44:48] = layout.checksum(bytes(out[:44])).to_bytes(4, "little")
    return bytes(out)


async def test_kvq_segment_of_channels_not_a_multiple_of_8_is_a_miss(
        backend: Backend) -> None:
    """Before: a kvq block whose segment table (checksums right) gave a segment 12 channels
    sent the decoder's search for its rotation blocks into an endless loop: the GET never
    answered and its worker thread spun for good (six such GETs took every thread a 2-core
    gateway decodes on). Now the segment table is corrupt: a miss."""
    store = await open_store(backend)
    try:
        await store.create_namespace("lossy", "kvq:bits=4,dtype=float16,head_dim=128")
        await store.put("lossy", b"k", bytes(np.full(128 * 16, 0x3C00, "<u2").tobytes()))
        await store.flush()
        loc = store.index.get(store.ns_id("lossy"), b"k")
        assert loc is not None
        info = store.segments.get(loc.segment)
        assert info is not None
        stored = (await store.get_many("lossy", [b"k"], decode=False))[0]
        assert stored is not None
    finally:
        await store.close()
    await replace_block(backend, info.name, b"k", kvq_with_segment_channels(bytes(stored), 12))
    store = await open_store(backend)
    try:
        with capture_logs() as logs:
            assert await asyncio.wait_for(store.get("lossy", b"k"), 30) is None
        (bad,) = [e for e in logs if e["event"] == "block.corrupt"]
        assert "segment table" in bad["problem"]
    finally:
        await store.close()
