"""Synthetic KV-cache tensors with the structure real ones have, for codec benchmarks.

Per attention head (``head_dim`` channels), for keys:
  * per-channel scales, log-normal: exp(N(0, 0.5));
  * outlier channels: head_dim/32 channels whose scale is multiplied by U(4, 10) and which
    carry a mean offset of U(0.5, 1.5) times their scale with a random sign (keys have a few
    large, same-signed channels);
  * correlated channels: a rank-8 latent factor (weight 0.5) added to i.i.d. N(0, 1);
  * per-token magnitude exp(N(0, 0.25)), and the first token (an attention sink) x3.
Values are milder: scales exp(N(0, 0.3)), head_dim/64 outlier channels x U(2, 4), no offsets.
Everything is a pure function of the seed.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


def synthetic_head(rng: np.random.Generator, tokens: int, head_dim: int, kind: str) -> F32:
    """One head's vectors, shape (tokens, head_dim), float32. ``kind`` is "k" or "v"."""
    d = head_dim
    key = kind == "k"
    scales = np.exp(rng.normal(0.0, 0.5 if key else 0.3, d))
    n_out = max(1, d // 32) if key else max(1, d // 64)
    out_idx = rng.choice(d, n_out, replace=False)
    scales[out_idx] *= rng.uniform(4, 10, n_out) if key else rng.uniform(2, 4, n_out)
    means = np.zeros(d)
    if key:
        signs = rng.choice([-1.0, 1.0], n_out)
        means[out_idx] = signs * rng.uniform(0.5, 1.5, n_out) * scales[out_idx]
    rank = 8
    latent = rng.standard_normal((tokens, rank)) @ rng.standard_normal((rank, d)) / np.sqrt(rank)
    z = rng.standard_normal((tokens, d)) + 0.5 * latent
    x = z * scales + means
    x *= np.exp(rng.normal(0.0, 0.25, tokens))[:, None]
    x[0] *= 3.0
    out: F32 = x.astype(np.float32)
    return out


def synthetic_blocks(seed: int = 0, layers: int = 4, heads: int = 8, tokens: int = 256,
                     head_dim: int = 128) -> list[F32]:
    """KV blocks: one per (layer, k|v), all heads' tokens, shape (heads*tokens, head_dim)."""
    rng = np.random.default_rng(seed)
    blocks = []
    for _ in range(layers):
        for kind in ("k", "v"):
            heads_x = [synthetic_head(rng, tokens, head_dim, kind) for _ in range(heads)]
            blocks.append(np.concatenate(heads_x))
    return blocks


def to_words(x: F32, dtype: str) -> bytes:
    """float32 -> fp16 or bf16 bytes (round to nearest even)."""
    if dtype == "float16":
        return x.astype("<f2").tobytes()
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return rounded.astype("<u2").tobytes()


def from_words(raw: bytes, dtype: str) -> F32:
    """fp16 or bf16 bytes -> float32 (flat)."""
    if dtype == "float16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float32)
    u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)
    return u.view(np.float32)
