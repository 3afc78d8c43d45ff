"""Codec blocks whose checksums are right but whose lengths lie: what the entry beside a
block says it decodes to is checked before a byte is decoded."""

from __future__ import annotations

import subprocess
import sys
import zlib

import pytest
import zstandard

from s3kv.errors import IntegrityError
from s3kv.store.codecs import KVQ_ID, NONE_ID, ZSTD_ID, decode_any
from s3kv.store.codecs.kvq_format import Segment
from tests.codecs.kvq_cases import encoded_blocks
from tests.store.test_hostile_blocks import kvq_with_segment_channels, zstd_block

pytestmark = pytest.mark.usefixtures("kvq_path")


def test_zstd_frame_declaring_more_than_its_header_is_corrupt() -> None:
    """Header and entry agree on 4096 bytes, the frame declares 1 GiB: zstandard would
    allocate the frame's figure (max_output_size does not bound a declared size)."""
    frame = zstandard.ZstdCompressor(write_content_size=True).compressobj(size=1 << 30)
    bomb = zstd_block(frame.compress(bytes(1 << 20)), 4096)  # the first MiB of the frame
    with pytest.raises(IntegrityError, match="frame declares 1073741824"):
        decode_any(ZSTD_ID, bomb, 4096)
    with pytest.raises(IntegrityError, match="frame declares"):
        decode_any(ZSTD_ID, bomb)


def test_zstd_header_longer_than_the_entry_is_corrupt() -> None:
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(b"x" * 5000)
    block = zstd_block(frame, 5000)
    assert decode_any(ZSTD_ID, block, 5000) == b"x" * 5000
    with pytest.raises(IntegrityError, match="the entry 4999"):
        decode_any(ZSTD_ID, block, 4999)


def test_zstd_frame_without_a_declared_size_is_bounded_by_the_header() -> None:
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"y" * 9000)
    with pytest.raises(IntegrityError):
        decode_any(ZSTD_ID, zstd_block(frame, 100), 100)
    assert decode_any(ZSTD_ID, zstd_block(frame, 9000), 9000) == b"y" * 9000


def test_kvq_header_length_other_than_the_entry_is_corrupt() -> None:
    _, enc = encoded_blocks()[1]
    raw_len = int.from_bytes(enc[24:32], "little")
    assert len(decode_any(KVQ_ID, enc, raw_len)) == raw_len
    for other in (raw_len - 2, raw_len + 2, 0, 1 << 32):
        with pytest.raises(IntegrityError, match="the entry"):
            decode_any(KVQ_ID, enc, other)
    # a header that lies (checksum recomputed) about its length: the payload does not add up
    head = bytearray(enc[:48])
    head[24:32] = (raw_len * 2).to_bytes(8, "little")
    head[44:48] = zlib.crc32(bytes(head[:44])).to_bytes(4, "little")
    with pytest.raises(IntegrityError):
        decode_any(KVQ_ID, bytes(head) + enc[48:], raw_len * 2)


def test_none_block_other_than_the_entry_is_corrupt() -> None:
    assert decode_any(NONE_ID, b"abc", 3) == b"abc"
    with pytest.raises(IntegrityError):
        decode_any(NONE_ID, b"abc", 4)


@pytest.mark.parametrize("channels", [12, 4, 129, 65535])
def test_kvq_segment_table_of_channels_not_a_multiple_of_8_is_corrupt(channels: int) -> None:
    """Before: the decoder's search for the segment's rotation blocks (sizes a multiple of 8)
    never ended. Run in a process of its own so that a hang fails the test, not the run."""
    _, enc = encoded_blocks()[2]  # 2.5 bits: two segments, the channels permuted
    bad = kvq_with_segment_channels(enc, channels)
    code = ("import sys; from s3kv.errors import IntegrityError; "
            "from s3kv.store.codecs import decode_any, KVQ_ID\n"
            "try: decode_any(KVQ_ID, sys.stdin.buffer.read())\n"
            "except IntegrityError as exc: print(exc)")
    done = subprocess.run([sys.executable, "-c", code], input=bad, capture_output=True,
                          timeout=60, check=True)
    assert b"bad segment table" in done.stdout
    with pytest.raises(ValueError, match="channels"):
        Segment(channels, 3).blocks  # noqa: B018
