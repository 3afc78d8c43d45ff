"""Numerics behind ``kvq``: rotations, codebooks, bit packing, fp16/bf16 conversions.

Everything here is deterministic and derived from small parameters (seed, dimension, bit
width), so an encoded block needs to carry only those parameters, never the matrices.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]
U16 = npt.NDArray[np.uint16]

#: quantizer grid: thresholds are snapped to multiples of 1/GRID (unit-variance units), so a
#: coordinate's code is one table lookup on floor(u * GRID)
GRID = 64


@lru_cache(maxsize=256)
def rotation(seed: int, n: int, index: int) -> F32:
    """A Haar-random orthogonal n x n matrix, a pure function of (seed, n, index).

    Gaussian entries come from SHAKE-256 (stable across numpy versions, unlike
    ``numpy.random``) through Box-Muller; QR with the sign of R's diagonal fixed makes the
    factorisation unique, so any LAPACK yields the same matrix to float rounding.
    """
    tag = b"s3kv-kvq-rotation" + seed.to_bytes(8, "little") + n.to_bytes(4, "little")
    raw = hashlib.shake_256(tag + index.to_bytes(4, "little")).digest(8 * (n * n + 1))
    words = np.frombuffer(raw, dtype="<u8")[: n * n + 1]
    uni = ((words >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    half = (n * n + 1) // 2
    r = np.sqrt(-2.0 * np.log(uni[:half]))
    theta = 2.0 * np.pi * uni[half : 2 * half]
    gauss = np.concatenate([r * np.cos(theta), r * np.sin(theta)])[: n * n].reshape(n, n)
    q, rr = np.linalg.qr(gauss)
    q *= np.sign(np.diag(rr))[None, :]
    out: F32 = np.ascontiguousarray(q, dtype=np.float32)
    out.setflags(write=False)
    return out


def _sphere_density(n: int, grid: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Density of one coordinate of a uniform point on the sphere of radius sqrt(n) in R^n."""
    inside = np.clip(1.0 - grid * grid / n, 0.0, None)
    dens = inside ** ((n - 3) / 2.0) if n > 3 else np.exp(-0.5 * grid * grid)
    total = float(dens.sum())
    out: npt.NDArray[np.float64] = dens / total
    return out


@lru_cache(maxsize=64)
def codebook(n: int, bits: int) -> tuple[F32, F32, float]:
    """Lloyd-Max levels for a rotated, normalised coordinate in dimension ``n`` at ``bits``.

    A coordinate of x/|x|*sqrt(n) after a random rotation follows the sphere-coordinate
    (scaled Beta) law, close to N(0, 1) for large n. Thresholds are snapped to the 1/GRID grid
    (the loss is second order) so encoding is one table lookup. Returns (levels, thresholds,
    expected relative MSE).
    """
    k = 1 << bits
    span = min(float(np.sqrt(n)), 8.0)
    fine = 16
    pts = (np.arange(-span * GRID * fine, span * GRID * fine) + 0.5) / (GRID * fine)
    dens = _sphere_density(n, pts)
    cdf = np.cumsum(dens)
    levels = np.interp((np.arange(k) + 0.5) / k, cdf, pts)
    cum_w = np.concatenate([[0.0], cdf])
    cum_wx = np.concatenate([[0.0], np.cumsum(dens * pts)])
    for _ in range(300):
        th = np.round((levels[:-1] + levels[1:]) / 2.0 * GRID) / GRID
        cut = np.searchsorted(pts, th)
        edges = np.concatenate([[0], cut, [len(pts)]])
        w = cum_w[edges[1:]] - cum_w[edges[:-1]]
        wx = cum_wx[edges[1:]] - cum_wx[edges[:-1]]
        new = np.where(w > 0, wx / np.maximum(w, 1e-300), levels)
        if np.allclose(new, levels, atol=1e-9):
            levels = new
            break
        levels = new
    th = np.round((levels[:-1] + levels[1:]) / 2.0 * GRID) / GRID
    idx = np.searchsorted(th, pts)
    distortion = float(np.sum(dens * (pts - levels[idx]) ** 2))
    return levels.astype(np.float32), th.astype(np.float32), distortion


@lru_cache(maxsize=64)
def code_table(n: int, bits: int) -> tuple[U8, float]:
    """Lookup table code = table[int(u * GRID + offset)] and that offset, for |u| <= sqrt(n)."""
    _, th, _ = codebook(n, bits)
    half = int(np.ceil(np.sqrt(n) * GRID)) + 2
    cells = (np.arange(2 * half + 2) - half + 0.5) / GRID
    table = np.searchsorted(th, cells).astype(np.uint8)
    table.setflags(write=False)
    return table, float(half)


def quantize(z: F32, inv: F32, n: int, bits: int) -> U8:
    """Codes of the rows of ``z`` scaled by ``inv`` (per row) to unit variance per coordinate."""
    table, offset = code_table(n, bits)
    q = np.multiply(z, (inv * np.float32(GRID))[:, None], dtype=np.float32)
    q += np.float32(offset)
    np.clip(q, 0.0, float(len(table) - 1), out=q)
    codes: U8 = np.take(table, q.astype(np.intp), mode="clip")
    return codes


# ---- bit packing: groups of 8 codes of b bits into b bytes, little-endian within the group --

def pack(codes: U8, bits: int) -> bytes:
    """Pack uint8 codes (< 2**bits), length a multiple of 8, into len*bits/8 bytes."""
    c = codes.reshape(-1, 8)
    if bits == 8:
        return c.tobytes()
    if 8 % bits == 0:
        per = 8 // bits
        c2 = codes.reshape(-1, per)
        out = c2[:, 0].copy()
        for k in range(1, per):
            out |= c2[:, k] << np.uint8(bits * k)
        return out.tobytes()
    acc = c[:, 0].astype(np.uint64)
    for k in range(1, 8):
        acc |= c[:, k].astype(np.uint64) << np.uint64(bits * k)
    return acc.view(np.uint8).reshape(-1, 8)[:, :bits].tobytes()


def unpack(data: U8, bits: int, count: int) -> U8:
    """Inverse of :func:`pack` for ``count`` codes."""
    if bits == 8:
        return data[:count].copy()
    if 8 % bits == 0:
        per = 8 // bits
        out = np.empty((data.size, per), dtype=np.uint8)
        mask = np.uint8((1 << bits) - 1)
        for k in range(per):
            np.bitwise_and(data >> np.uint8(bits * k), mask, out=out[:, k])
        return out.reshape(-1)[:count]
    groups = data.reshape(-1, bits)
    buf = np.zeros((groups.shape[0], 8), dtype=np.uint8)
    buf[:, :bits] = groups
    acc: npt.NDArray[np.uint64] = buf.view(np.uint64).reshape(-1)
    out = np.empty((groups.shape[0], 8), dtype=np.uint8)
    m = np.uint64((1 << bits) - 1)
    for k in range(8):
        out[:, k] = (acc >> np.uint64(bits * k)) & m
    return out.reshape(-1)[:count]


def dequantize(data: U8, bits: int, rows: int, n: int, levels: F32) -> F32:
    """Packed codes straight to float levels (rows x n), through byte -> levels tables."""
    if bits in (2, 4):
        # one gather of 8- or 16-byte rows: the table viewed as uint64 / complex128
        table = _byte_table(levels.tobytes(), bits)
        wide = np.take(table, data, mode="clip")
        return wide.view(np.float32).reshape(rows, n)
    if bits == 3:
        g = data.reshape(-1, 3).astype(np.uint16)
        idx = np.empty((g.shape[0], 2), dtype=np.uint16)
        idx[:, 0] = g[:, 0] | ((g[:, 1] & np.uint16(0xF)) << np.uint16(8))
        idx[:, 1] = (g[:, 1] >> np.uint16(4)) | (g[:, 2] << np.uint16(4))
        wide = np.take(_tri_table(levels.tobytes()), idx, mode="clip")
        return wide.view(np.float32).reshape(rows, n)
    codes = unpack(data, bits, rows * n)
    vals: F32 = levels[codes].reshape(rows, n)
    return vals


@lru_cache(maxsize=32)
def _byte_table(levels_raw: bytes, bits: int) -> npt.NDArray[np.generic]:
    """byte -> its 8/bits levels, one row per byte, viewed as one wide scalar per row."""
    levels = np.frombuffer(levels_raw, dtype=np.float32)
    per = 8 // bits
    byte = np.arange(256, dtype=np.uint16)
    mask = (1 << bits) - 1
    cols = [levels[(byte >> (bits * k)) & mask] for k in range(per)]
    rows = np.ascontiguousarray(np.stack(cols, axis=1), dtype=np.float32)
    return rows.view(np.uint64 if per == 2 else np.complex128).reshape(256)


@lru_cache(maxsize=32)
def _tri_table(levels_raw: bytes) -> npt.NDArray[np.complex128]:
    """12 bits (four 3-bit codes) -> four levels, as one complex128 per row."""
    levels = np.frombuffer(levels_raw, dtype=np.float32)
    word = np.arange(4096, dtype=np.uint16)
    cols = [levels[(word >> (3 * k)) & 7] for k in range(4)]
    rows = np.ascontiguousarray(np.stack(cols, axis=1), dtype=np.float32)
    return rows.view(np.complex128).reshape(4096)


# ---- fp16 / bf16 <-> float32 --------------------------------------------------------------

@lru_cache(maxsize=1)
def _f16_table() -> F32:
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def to_f32(raw: U16, dtype: str) -> F32:
    """16-bit words (fp16 or bf16 bit patterns) to float32."""
    if dtype == "float16":
        out: F32 = np.take(_f16_table(), raw, mode="clip")
        return out
    wide = raw.astype(np.uint32)
    wide <<= np.uint32(16)
    return wide.view(np.float32)


_F16_SCALE = np.float32(2.0**-112)


def from_f32(x: F32, dtype: str, prescaled: bool = False) -> U16:
    """float32 to fp16/bf16 bit patterns, rounding half away from zero in magnitude.

    For fp16, ``prescaled`` says x was already multiplied by 2**-112 (the decoder folds that
    into its gains): then float32 bits >> 13 are the fp16 bits, subnormals included. Values
    that would overflow fp16 go to the exact numpy cast instead.
    """
    if dtype == "bfloat16":
        b = x.view(np.uint32)
        b += np.uint32(0x8000)
        b >>= np.uint32(16)
        return b.astype(np.uint16)
    y = x if prescaled else x * _F16_SCALE
    b = y.view(np.uint32)
    sign = b >> np.uint32(16)
    sign &= np.uint32(0x8000)
    b &= np.uint32(0x7FFFFFFF)
    b += np.uint32(0x1000)
    b >>= np.uint32(13)
    if b.size and int(b.max()) >= 0x7C00:
        exact = (y.astype(np.float64) * 2.0**112).astype(np.float16)
        return exact.view(np.uint16)
    b |= sign
    return b.astype(np.uint16)
