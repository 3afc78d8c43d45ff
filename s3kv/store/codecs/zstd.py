"""``zstd``: lossless zstd with an optional byte shuffle of 16-bit values.

fp16/bf16 KV data compresses poorly as is (the low mantissa bytes are noise); splitting each
16-bit value into a plane of high bytes and a plane of low bytes lets zstd find the
redundancy in sign and exponent bytes. Large blocks compress on several threads.
"""

from __future__ import annotations

import struct

import numpy as np
import zstandard

from s3kv.errors import IntegrityError, InvalidInput
from s3kv.store.codecs.spec import CodecSpec
from s3kv.store.layout import checksum

CODEC_ID = 1
MAGIC = b"S3KZ"
VERSION = 1
HEADER = struct.Struct("<4sBBbBQII")  # 24 bytes; the last field is the header crc32
FLAG_SHUFFLE = 1
#: blocks at least this large compress with zstd's worker threads
THREADS_FROM = 4 << 20
MAX_RAW = 1 << 40


def shuffle16(data: memoryview) -> bytes:
    """Even-length bytes -> all low bytes then all high bytes of the 16-bit words."""
    words = np.frombuffer(data, dtype=np.uint8).reshape(-1, 2)
    return np.ascontiguousarray(words.T).tobytes()


def unshuffle16(data: bytes) -> bytes:
    planes = np.frombuffer(data, dtype=np.uint8).reshape(2, -1)
    return np.ascontiguousarray(planes.T).tobytes()


class ZstdCodec:
    codec_id = CODEC_ID

    def __init__(self, spec: CodecSpec, threads: int | None = None) -> None:
        if spec.name != "zstd":
            raise InvalidInput(f"not a zstd spec: {spec.name}")
        self.level = spec.level
        self.shuffle = spec.shuffle
        self.threads = threads

    def encode(self, data: bytes | memoryview) -> bytes:
        mv = memoryview(data).cast("B")
        raw_len = len(mv)
        shuffled = self.shuffle and raw_len >= 2
        body: bytes | memoryview = mv
        if shuffled:
            # an odd trailing byte stays in place after the two planes
            even = raw_len & ~1
            body = shuffle16(mv[:even]) + bytes(mv[even:])
        threads = self.threads
        if threads is None:
            threads = -1 if raw_len >= THREADS_FROM else 0
        cctx = zstandard.ZstdCompressor(level=self.level, write_checksum=True,
                                        write_content_size=True, threads=threads)
        frame = cctx.compress(body)
        flags = FLAG_SHUFFLE if shuffled else 0
        head = HEADER.pack(MAGIC, VERSION, flags, self.level, 0, raw_len, checksum(frame), 0)
        head = head[:-4] + struct.pack("<I", checksum(head[:-4]))
        return head + frame

    def decode(self, data: bytes | memoryview, raw_length: int | None = None) -> bytes:
        return decode(data, raw_length)


def _corrupt(what: str) -> IntegrityError:
    return IntegrityError(f"zstd block is corrupt: {what}")


def decode(data: bytes | memoryview, raw_length: int | None = None) -> bytes:
    """Decode a zstd block; IntegrityError on anything malformed (never garbage).

    ``raw_length``: the length the block must decode to (its entry's); a header or a frame
    that claims another is corrupt before a byte is decompressed. zstandard allocates the
    size a frame's header declares, whatever ``max_output_size`` says: a 64 KiB frame of
    zeros that declares 2 GiB took 2 GiB of memory to be found wrong."""
    mv = memoryview(data).cast("B")
    if len(mv) < HEADER.size:
        raise _corrupt(f"{len(mv)} bytes is shorter than the {HEADER.size}-byte header")
    magic, version, flags, _level, _res, raw_len, frame_crc, head_crc = HEADER.unpack_from(mv)
    if magic != MAGIC:
        raise _corrupt("bad magic")
    if checksum(mv[:HEADER.size - 4]) != head_crc:
        raise _corrupt("header checksum mismatch")
    if version != VERSION or flags & ~FLAG_SHUFFLE or raw_len > MAX_RAW:
        raise _corrupt("inconsistent header fields")
    if raw_length is not None and raw_len != raw_length:
        raise _corrupt(f"header says {raw_len} bytes, the entry {raw_length}")
    frame = mv[HEADER.size:]
    if checksum(frame) != frame_crc:
        raise _corrupt("payload checksum mismatch")
    try:
        declared = zstandard.frame_content_size(frame)
        if declared != raw_len and declared >= 0:  # -1: the frame does not say
            raise _corrupt(f"frame declares {declared} bytes, header says {raw_len}")
        body = zstandard.ZstdDecompressor().decompress(frame, max_output_size=raw_len)
    except zstandard.ZstdError as exc:
        raise _corrupt(f"zstd frame: {exc}") from None
    if len(body) != raw_len:
        raise _corrupt(f"decoded {len(body)} bytes, header says {raw_len}")
    if flags & FLAG_SHUFFLE:
        even = raw_len & ~1
        return unshuffle16(body[:even]) + body[even:]
    return body
