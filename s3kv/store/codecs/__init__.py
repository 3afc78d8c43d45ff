"""Block codecs: ``none``, ``zstd`` (lossless) and ``kvq`` (lossy KV quantization).

The store picks a codec per namespace (or per request through :func:`codec_from_headers`),
encodes each block before it enters a segment and records ``codec.codec_id`` beside the
block; reads call :func:`decode_any`. Encoded blocks are self-describing. See docs/codecs.md.
"""

from s3kv.store.codecs.base import (
    CODEC_IDS,
    KVQ_ID,
    NONE_ID,
    ZSTD_ID,
    Codec,
    NoneCodec,
    codec_for,
    decode_any,
)
from s3kv.store.codecs.spec import (
    CODEC_HEADERS,
    HEADER_BITS,
    HEADER_CODEC,
    HEADER_DTYPE,
    HEADER_HEAD_DIM,
    CodecSpec,
    codec_from_headers,
    parse_codec_spec,
)

__all__ = [
    "CODEC_HEADERS",
    "CODEC_IDS",
    "HEADER_BITS",
    "HEADER_CODEC",
    "HEADER_DTYPE",
    "HEADER_HEAD_DIM",
    "KVQ_ID",
    "NONE_ID",
    "ZSTD_ID",
    "Codec",
    "CodecSpec",
    "NoneCodec",
    "codec_for",
    "codec_from_headers",
    "decode_any",
    "parse_codec_spec",
]
