"""Blocks in the bucket that the store did not write as they are: a block whose entry's
checksum matches its bytes (another tool wrote both) but whose codec header lies is a miss,
found before it is decoded; its decoding takes no more memory than its entry says."""

from __future__ import annotations

import resource
import time

import zstandard
from structlog.testing import capture_logs

from s3kv.backends.base import Backend
from s3kv.store import layout
from s3kv.store.codecs import ZSTD_ID, zstd
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
