"""The codec interface the store calls, and the registry from spec or codec id to codec."""

from __future__ import annotations

from typing import Protocol

from s3kv.errors import IntegrityError, InvalidInput
from s3kv.store.codecs import kvq, zstd
from s3kv.store.codecs.spec import CodecSpec

NONE_ID = 0
ZSTD_ID = zstd.CODEC_ID
KVQ_ID = kvq.CODEC_ID
CODEC_IDS = {"none": NONE_ID, "zstd": ZSTD_ID, "kvq": KVQ_ID}


class Codec(Protocol):
    """Synchronous (the store runs it in a worker thread, off the event loop)."""

    codec_id: int

    def encode(self, data: bytes | memoryview) -> bytes:
        """Encoded, self-describing bytes. InvalidInput if data does not fit the spec."""
        ...

    def decode(self, data: bytes | memoryview, raw_length: int | None = None) -> bytes:
        """The block's bytes back. IntegrityError on corrupt input, never garbage, and on a
        block that would not decode to ``raw_length`` bytes (when given)."""
        ...


class NoneCodec:
    """Identity: the exact bytes written (the store's block checksum guards them)."""

    codec_id = NONE_ID

    def encode(self, data: bytes | memoryview) -> bytes:
        return bytes(data)

    def decode(self, data: bytes | memoryview, raw_length: int | None = None) -> bytes:
        return decode_any(NONE_ID, data, raw_length)


def codec_for(spec: CodecSpec) -> Codec:
    """The codec for a complete spec (kvq needs dtype and head_dim: InvalidInput otherwise)."""
    if spec.name == "zstd":
        return zstd.ZstdCodec(spec)
    if spec.name == "kvq":
        return kvq.KvqCodec(spec)
    if spec.name == "none":
        return NoneCodec()
    raise InvalidInput(f"unknown codec {spec.name!r}")


def decode_any(codec_id: int, data: bytes | memoryview, raw_length: int | None = None) -> bytes:
    """Decode a block by the codec id stored beside it; every parameter is in the block.
    ``raw_length``: the length its entry gives it (the store's reads pass it): a block whose
    header claims another is an IntegrityError before anything is decoded, so what a block
    decodes to (a zstd frame's claimed size above all) is never more than its entry says."""
    if codec_id == NONE_ID:
        if raw_length is not None and len(data) != raw_length:
            raise IntegrityError(f"block is {len(data)} bytes, its entry says {raw_length}")
        return bytes(data)
    if codec_id == ZSTD_ID:
        return zstd.decode(data, raw_length)
    if codec_id == KVQ_ID:
        return kvq.decode(data, raw_length)
    raise IntegrityError(f"unknown codec id {codec_id}")
