"""Shared by the codec tests: kvq's error against the raw words, and one encoded block of
each kind (zstd, kvq at 3 bits, kvq at 2.5 bits with its channels permuted)."""

from __future__ import annotations

import numpy as np

from s3kv.store.codecs import KVQ_ID, ZSTD_ID, CodecSpec, codec_for
from s3kv.store.codecs.synth import from_words, synthetic_blocks, to_words

#: the bit widths and dtypes the kvq tests cover
BITS = (2.0, 2.5, 3.0, 3.5, 4.0)
DTYPES = ("float16", "bfloat16")


def rel_mse_and_cos(raw: bytes, dec: bytes, dtype: str, d: int) -> tuple[float, float]:
    a = from_words(raw, dtype).reshape(-1, d).astype(np.float64)
    b = from_words(dec, dtype).reshape(-1, d).astype(np.float64)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return float(((a - b) ** 2).sum() / (a * a).sum()), float(cos.mean())


def encoded_blocks() -> list[tuple[int, bytes]]:
    x = synthetic_blocks(seed=2, layers=1, heads=1, tokens=64)[0]
    raw = to_words(x, "bfloat16")
    return [
        (ZSTD_ID, codec_for(CodecSpec("zstd", shuffle=True)).encode(raw)),
        (KVQ_ID, codec_for(CodecSpec("kvq", dtype="bfloat16", head_dim=128,
                                     bits=3)).encode(raw)),
        (KVQ_ID, codec_for(CodecSpec("kvq", dtype="bfloat16", head_dim=128,
                                     bits=2.5)).encode(raw)),
    ]
