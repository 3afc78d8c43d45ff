"""Numerics behind ``kvq``: rotations, codebooks, bit packing, fp16/bf16 conversions.

Everything here is deterministic and derived from small parameters (seed, dimension, bit
width), so an encoded block needs to carry only those parameters, never the matrices.
"""

from __future__ import annotations

import hashlib
import threading
from functools import lru_cache
from typing import Any

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


# ---- scratch buffers -----------------------------------------------------------------------
#
# kvq works through a block in chunks of rows (CHUNK_ELEMS elements each, so a chunk's float32
# working set stays in L2) and writes every intermediate into per-thread buffers that live
# across calls: fresh multi-megabyte temporaries cost more in page faults (glibc returns them
# to the kernel on free) than the arithmetic on them.

#: elements per chunk: 256 Ki float32 = 1 MiB (2048 vectors at head_dim 128); numpy calls
#: cost microseconds each, so fewer, larger chunks beat L2-sized ones here
CHUNK_ELEMS = 1 << 18

#: the encoder keeps a block's float32 copy between its two passes up to this many elements
#: (16 MiB per thread); larger blocks are converted twice
KEEP_FLOAT_ELEMS = 1 << 22

_local = threading.local()


def chunk_rows(d: int) -> int:
    return max(8, CHUNK_ELEMS // d)


def scratch(name: str, shape: tuple[int, ...], dtype: Any) -> npt.NDArray[Any]:
    """This thread's buffer ``name`` viewed as ``shape`` (contents undefined)."""
    views: dict[str, tuple[tuple[int, ...], Any, npt.NDArray[Any]]] | None = getattr(
        _local, "views", None)
    if views is None:
        views = _local.views = {}
        _local.bufs = {}
    hit = views.get(name)
    if hit is not None and hit[0] == shape and hit[1] is dtype:
        return hit[2]
    bufs: dict[str, npt.NDArray[np.uint8]] = _local.bufs
    dt = np.dtype(dtype)
    size = dt.itemsize
    for dim in shape:
        size *= dim
    buf = bufs.get(name)
    if buf is None or buf.size < size:
        buf = bufs[name] = np.empty(max(size, 64), dtype=np.uint8)
    out: npt.NDArray[Any] = buf[:size].view(dt).reshape(shape)
    views[name] = (shape, dtype, out)
    return out


def quantize(z: F32, inv: F32, n: int, bits: int, out: U8) -> U8:
    """Codes of the rows of ``z`` scaled by ``inv`` (per row, to unit variance per coordinate,
    times GRID) into ``out``. ``z`` is clobbered.

    ``u * GRID + offset`` stays inside the table for every finite row (|u| <= sqrt(n) up to
    rounding, the table has 2 cells of margin) and ``take(mode="clip")`` guards the rest.
    """
    table, offset = code_table(n, bits)
    np.multiply(z, inv[:, None], out=z)
    z += np.float32(offset)
    idx = scratch("q-idx", z.shape, np.uint16)  # narrower indices gather faster here
    np.copyto(idx, z, casting="unsafe")  # truncation = floor: every value is positive
    np.take(table, idx, out=out, mode="clip")
    return out


# ---- bit packing: groups of 8 codes of b bits into b bytes, little-endian within the group --
#
# A group of 8 one-byte codes is one little-endian uint64 (code k in byte k). Packing folds
# neighbours together three times (bytes -> 16-bit lanes -> 32-bit lanes -> the word), each a
# mask, a shift and an or over the whole array; unpacking runs the same steps backwards.

_M8 = np.uint64(0x00FF00FF00FF00FF)
_M16 = np.uint64(0x0000FFFF0000FFFF)
_M32 = np.uint64(0x00000000FFFFFFFF)


def pack_into(codes: U8, bits: int, out: U8) -> None:
    """Pack uint8 codes (< 2**bits, length a multiple of 8) into ``out`` (len*bits/8 bytes).
    ``codes`` is clobbered."""
    if bits == 8:
        out[...] = codes.reshape(out.shape)
        return
    w = codes.reshape(-1).view(np.uint64)
    hi = scratch("pack-hi", w.shape, np.uint64)
    # fold neighbouring lanes: lane = lo | hi << L becomes lo | hi << k (k = bits in lo) by
    # subtracting hi * (2**L - 2**k): three passes per level on 16-, 32-, 64-bit views
    for lane, k in ((np.uint16, bits), (np.uint32, 2 * bits), (np.uint64, 4 * bits)):
        width = 8 * np.dtype(lane).itemsize // 2
        wl: npt.NDArray[Any] = w.view(lane)
        t: npt.NDArray[Any] = hi.view(lane)
        np.right_shift(wl, lane(width), out=t)
        np.multiply(t, lane((1 << width) - (1 << k)), out=t)
        np.subtract(wl, t, out=wl)
    if bits in (1, 2, 4):
        np.copyto(out.view(f"<u{bits}"), w, casting="unsafe")
        return
    # 3 and 5+ bits: overlapping little-endian stores every ``bits`` bytes (each store's
    # spill is overwritten by the next one); the last group, which would spill past the end
    # of ``out``, goes byte by byte
    groups = w.size
    if groups > 1:
        width = 4 if bits <= 4 else 8
        view = np.ndarray(shape=(groups - 1,), dtype=f"<u{width}", buffer=out,
                          strides=(bits,))
        np.copyto(view, w[:-1], casting="unsafe")
    if groups:
        out[-bits:] = w[-1:].view(np.uint8)[:bits]
def pack(codes: U8, bits: int) -> bytes:
    """Pack uint8 codes (< 2**bits), length a multiple of 8, into len*bits/8 bytes."""
    out = np.empty(codes.size * bits // 8, dtype=np.uint8)
    pack_into(codes.copy(), bits, out)
    return out.tobytes()


def _unpack_words(data: U8, bits: int) -> npt.NDArray[np.uint64]:
    """Groups of ``bits`` bytes to uint64 words, 16-bit lane k holding codes 2k and 2k+1."""
    groups = data.reshape(-1, bits)
    buf = scratch("unpack-w", (groups.shape[0], 8), np.uint8)
    buf[:, bits:] = 0
    buf[:, :bits] = groups
    w: npt.NDArray[np.uint64] = buf.view(np.uint64).reshape(-1)
    hi = scratch("unpack-hi", w.shape, np.uint64)
    np.left_shift(w, np.uint64(32 - 4 * bits), out=hi)
    hi &= ~_M32
    w &= np.uint64((1 << (4 * bits)) - 1)
    w |= hi
    np.left_shift(w, np.uint64(16 - 2 * bits), out=hi)
    hi &= ~_M16
    w &= np.uint64(((1 << (2 * bits)) - 1) * 0x0000000100000001)
    w |= hi
    return w


def unpack(data: U8, bits: int, count: int) -> U8:
    """Inverse of :func:`pack` for ``count`` codes."""
    if bits == 8:
        return data[:count].copy()
    w = _unpack_words(data, bits)
    hi = w << np.uint64(8 - bits)
    hi &= ~_M8
    w &= np.uint64(((1 << bits) - 1) * 0x0001000100010001)
    w |= hi
    out: U8 = w.view(np.uint8)[:count].copy()
    return out


def dequantize(src: U8, start: int, rows: int, n: int, bits: int, levels: F32,
               out: F32 | None = None) -> F32:
    """Packed codes straight to float levels (rows x n): one gather of table rows holding
    the levels of 2, 4 or 8 consecutive codes, indexed by the bits of those codes. The codes
    are ``src[start:start + rows * n * bits // 8]`` (``src`` 1-D, contiguous)."""
    data = src[start:start + rows * n * bits // 8]
    res: F32 = np.empty((rows, n), dtype=np.float32) if out is None else out
    flat = res.reshape(-1)
    if bits == 8:
        np.take(levels, data, out=flat, mode="clip")
        return res
    table = _code_rows(levels.tobytes(), bits)
    per = _PER[bits]  # codes per table row
    if bits in (1, 2, 4):  # a table row per byte
        idx: npt.NDArray[Any] = data
    else:
        # 3 bits: a 24-bit group = two 12-bit indices, spread to the uint16 halves of a
        # uint32; 5 (and 6, 7): a 40-bit group = four 10-bit indices, spread to the uint16
        # quarters of a uint64. Groups are read as overlapping unaligned words.
        width = 4 if bits == 3 else 8
        groups = data.size // bits
        wt = np.dtype(f"<u{width}")
        if start + data.size + width - bits <= src.size:  # the last load stays inside src
            unaligned = np.ndarray(shape=(groups,), dtype=wt, buffer=src, strides=(bits,),
                                   offset=start)
        else:
            buf = scratch("dq-pad", (data.size + 8,), np.uint8)
            np.copyto(buf[:data.size], data)
            buf[data.size:] = 0
            unaligned = np.ndarray(shape=(groups,), dtype=wt, buffer=buf, strides=(bits,))
        w = scratch("dq-w", (groups,), wt)
        hi = scratch("dq-hi", (groups,), wt)
        step = per * bits
        if width == 4:
            np.left_shift(unaligned, wt.type(16 - step), out=hi)
            np.bitwise_and(unaligned, wt.type((1 << step) - 1), out=w)
            hi &= wt.type(((1 << step) - 1) << 16)
            w |= hi
        else:
            np.left_shift(unaligned, wt.type(32 - 2 * step), out=hi)
            np.bitwise_and(unaligned, wt.type((1 << (2 * step)) - 1), out=w)
            hi &= wt.type(((1 << (2 * step)) - 1) << 32)
            w |= hi
            np.left_shift(w, wt.type(16 - step), out=hi)
            w &= wt.type(((1 << step) - 1) * 0x0000000100000001)
            hi &= ~_M16
            w |= hi
        idx = w.view(np.uint16)
    np.take(table, idx, out=flat.view(table.dtype), mode="clip")
    return res


#: codes per table row: a row is 8 or 16 bytes (2 or 4 float32 levels), 32 for 1-bit codes
_PER = {1: 8, 2: 4, 3: 4, 4: 2, 5: 2, 6: 2, 7: 2}


@lru_cache(maxsize=32)
def _code_rows(levels_raw: bytes, bits: int) -> npt.NDArray[Any]:
    """Row r holds the levels of the _PER[bits] codes packed in the bits of r."""
    levels = np.frombuffer(levels_raw, dtype=np.float32)
    per = _PER[bits]
    word = np.arange(1 << (per * bits), dtype=np.uint32)
    mask = (1 << bits) - 1
    cols = [levels[(word >> (bits * k)) & mask] for k in range(per)]
    rows = np.ascontiguousarray(np.stack(cols, axis=1), dtype=np.float32)
    wide = {2: np.dtype(np.uint64), 4: np.dtype(np.complex128)}.get(per, np.dtype("V32"))
    out: npt.NDArray[Any] = rows.view(wide).reshape(-1)
    return out


# ---- fp16 / bf16 <-> float32 --------------------------------------------------------------
#
# Pure integer shifts on the bit patterns (numpy's float16 casts cost ~3 ns per element here).

#: float32 value of fp16 bits << 13 is the fp16 value times 2**-112 (subnormals included)
F16_SCALE = np.float32(2.0**-112)
_F16_UNSCALE = np.float32(2.0**112)


def to_f32(raw: U16, dtype: str, out: F32 | None = None) -> F32:
    """16-bit words (fp16 or bf16 bit patterns, finite) to float32, exactly.

    fp16 infinities and NaNs come out as finite values: callers check the words first.
    """
    res: F32 = np.empty(raw.shape, dtype=np.float32) if out is None else out
    if dtype == "float16":
        # sign-extended << 13 leaves the sign in bit 31 and junk in bits 28-30: clear those
        a = res.view(np.int32)
        np.left_shift(raw.view(np.int16), 13, out=a, dtype=np.int32)
        a &= np.int32(-0x70000001)  # 0x8FFFFFFF
        res *= _F16_UNSCALE
        return res
    np.left_shift(raw, 16, out=res.view(np.uint32), dtype=np.uint32)
    return res


def from_f32(x: F32, dtype: str, prescaled: bool = False, out: U16 | None = None,
             check: bool = True, truncate: bool = False, sign: U16 | None = None) -> U16:
    """float32 to fp16/bf16 bit patterns, rounding half away from zero in magnitude
    (``truncate``: toward zero, one integer pass fewer; see TRUNCATION_GAIN).

    ``x`` is clobbered (its bits are the scratch space). For fp16, ``prescaled`` says x was
    already multiplied by 2**-112 (the decoder folds that into its gains): then float32 bits
    >> 13 are the fp16 bits, subnormals included. Values that would overflow fp16 go to the
    exact numpy cast instead; ``check=False`` says the caller has proved |x| < F16_SAFE.
    ``out``, if given, receives the words (any strides); ``sign`` is a scratch buffer of
    x's shape.
    """
    res: U16 = np.empty(x.shape, dtype=np.uint16) if out is None else out
    b = x.view(np.uint32)
    if dtype == "bfloat16":
        if not truncate:
            b += np.uint32(0x8000)
        np.right_shift(b, np.uint32(16), out=res, casting="unsafe")
        return res
    if not prescaled:
        x *= F16_SCALE
    if check and x.size and (float(x.max()) >= _F16_LIMIT or float(x.min()) <= -_F16_LIMIT):
        with np.errstate(over="ignore"):
            exact = (x.astype(np.float64) * 2.0**112).astype(np.float16)
        res[...] = exact.view(np.uint16)
        return res
    if sign is None:
        sign = scratch("f16-sign", x.shape, np.uint16)
    np.right_shift(b, np.uint32(16), out=sign, casting="unsafe")
    sign &= np.uint16(0x8000)
    if not truncate:
        b += np.uint32(0x1000)  # the sign bit is apart: this rounds the magnitude
    np.right_shift(b, np.uint32(13), out=res, casting="unsafe")  # bit 15 = float bit 28 = 0
    res |= sign
    return res


#: Truncating a float32 to a p-bit mantissa loses a uniform [0, 1) ulp, as much spread as
#: rounding (ulp**2 / 12) but biased by -ulp/2, on average (log-uniform values) a relative
#: -0.72 * 2**-(p+1). The kvq decoder multiplies its gains by 1 + that and truncates: the
#: same error variance as rounding, the bias gone, one pass less.
TRUNCATION_GAIN = {"float16": 1.0 + 0.72 * 2.0**-11, "bfloat16": 1.0 + 0.72 * 2.0**-8}
#: prescaled magnitudes below this never reach fp16 infinity (a margin below _F16_LIMIT)
F16_SAFE = 2.0**15 * 2.0**-112
#: prescaled magnitudes from here up round to fp16 infinity (bits 0x7C00 after rounding)
_F16_LIMIT = float(np.array([(0x7C00 << 13) - 0x1000], dtype=np.uint32).view(np.float32)[0])
