"""The ``kvq`` decoder: any valid version-2 block back to its fp16/bf16 words, or an
IntegrityError (never garbage). The format is in docs/codecs.md; the encoder is kvq.py."""

from __future__ import annotations

import math
import struct
import zlib
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from s3kv.errors import IntegrityError
from s3kv.store.codecs import kvq_math as km
from s3kv.store.codecs.kvq_format import (
    DTYPE_NAMES,
    FLAG_PERMUTED,
    HEADER,
    LAYOUTS,
    MAGIC,
    VERSION,
    Segment,
    perm_dtype,
)

#: the un-permutation moves the widest words whose channel groups the order keeps together
_WORDS = ((4, np.uint64), (2, np.uint32))


@lru_cache(maxsize=64)
def _book(raw: bytes) -> tuple[npt.NDArray[np.float32], float]:
    """A stored fp16 codebook as float32 levels, and its largest magnitude."""
    book = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    if not np.isfinite(book).all():
        raise _corrupt("codebook is not finite")
    book.setflags(write=False)
    return book, float(np.abs(book).max())


@lru_cache(maxsize=64)
def _gain_table(lo: float, step: float, dtype: str) -> npt.NDArray[np.float32]:
    """Gain code -> gain, with the decoder's output scale folded in: 2**-112 for fp16
    (``from_f32(prescaled=True)``) and the truncation bias (``truncate=True``)."""
    if not (math.isfinite(lo) and math.isfinite(step) and step >= 0):
        raise _corrupt("bad gain range")
    table = np.zeros(256, dtype=np.float64)
    with np.errstate(over="ignore"):
        table[1:] = np.exp(lo + step * np.arange(255))
    if not np.isfinite(table).all() or table.max() > 2.0**70:
        raise _corrupt("gains out of range")
    table *= km.TRUNCATION_GAIN[dtype] * (float(km.F16_SCALE) if dtype == "float16" else 1.0)
    out = table.astype(np.float32)
    out.setflags(write=False)
    return out


@lru_cache(maxsize=64)
def _unpermutation(raw: bytes, d: int) -> tuple[int, npt.NDArray[np.intp]]:
    """From a stored channel order: (g, index) such that output word group k (channels
    g*k .. g*k+g-1) is stored group index[k]. g is 4 or 2 when the order moves only aligned
    groups of that many channels, in order (one gather of 64- or 32-bit words undoes it), else
    1 (a gather of the 16-bit words)."""
    perm = np.frombuffer(raw, dtype=perm_dtype(d))
    if perm.size != d or int(perm.max(initial=0)) >= d:
        raise _corrupt("channel order is not a permutation")
    inverse = np.full(d, -1, dtype=np.intp)
    inverse[perm] = np.arange(d)
    if int(inverse.min()) < 0:
        raise _corrupt("channel order is not a permutation")
    for g, _ in _WORDS:
        if d % g == 0:
            grouped = inverse.reshape(-1, g)
            first = grouped[:, :1]
            if not (first % g).any() and (grouped == first + np.arange(g)).all():
                out: npt.NDArray[np.intp] = grouped[:, 0] // g
                out.setflags(write=False)
                return g, out
    inverse.setflags(write=False)
    return 1, inverse


def _corrupt(what: str) -> IntegrityError:
    return IntegrityError(f"kvq block is corrupt: {what}")


def decode(data: bytes | memoryview) -> bytes:
    """Decode a kvq block; IntegrityError on anything malformed (never garbage)."""
    mv = memoryview(data).cast("B")
    if len(mv) < HEADER.size:
        raise _corrupt(f"{len(mv)} bytes is shorter than the {HEADER.size}-byte header")
    fields = HEADER.unpack_from(mv)
    (magic, version, dtype_id, d, bits2, n_seg, flags, _r1, _r2, seed, raw_len, pay_len,
     pay_crc, head_crc) = fields
    if magic != MAGIC:
        raise _corrupt("bad magic")
    if zlib.crc32(mv[:HEADER.size - 4]) != head_crc:
        raise _corrupt("header checksum mismatch")
    if version != VERSION:
        raise _corrupt(f"unknown format version {version}")
    if pay_len != len(mv) - HEADER.size:
        raise _corrupt(f"payload is {len(mv) - HEADER.size} bytes, header says {pay_len}")
    payload = mv[HEADER.size:]
    if zlib.crc32(payload) != pay_crc:
        raise _corrupt("payload checksum mismatch")
    dtype = DTYPE_NAMES.get(dtype_id)
    if dtype is None or d == 0 or d % 8 or raw_len % (2 * d) or not 1 <= n_seg <= 8:
        raise _corrupt("inconsistent header fields")
    if bits2 / 2 not in LAYOUTS or flags & ~FLAG_PERMUTED:
        raise _corrupt("inconsistent header fields")
    n = raw_len // (2 * d)
    try:
        return _decode_payload(payload, dtype, d, n_seg, bool(flags & FLAG_PERMUTED), seed, n)
    except (ValueError, struct.error, IndexError) as exc:
        raise _corrupt(f"malformed payload ({exc})") from None


def _decode_payload(payload: memoryview, dtype: str, d: int, n_seg: int, permuted: bool,
                    seed: int, n: int) -> bytes:
    pos = 0

    def take(size: int) -> memoryview:
        nonlocal pos
        if size < 0 or pos + size > len(payload):
            raise _corrupt("payload shorter than its sections")
        out = payload[pos:pos + size]
        pos += size
        return out

    unperm = None
    if permuted:
        unperm = _unpermutation(bytes(take(np.dtype(perm_dtype(d)).itemsize * d)), d)
    layout = []
    for _ in range(n_seg):
        ch, bits, blocks = struct.unpack("<HBB", take(4))
        seg = Segment(ch, bits)
        if not 1 <= bits <= 8 or ch == 0 or seg.blocks != blocks:
            raise _corrupt("bad segment table")
        layout.append(seg)
    if sum(g.channels for g in layout) != d:
        raise _corrupt("segments do not cover head_dim")
    books = [_book(bytes(take(2 << g.bits))) for g in layout]
    lo, step = struct.unpack("<dd", take(16))
    n_blocks = sum(g.blocks for g in layout)
    gcodes = np.frombuffer(take(n * n_blocks), dtype=np.uint8).reshape(n, n_blocks)
    # one contiguous row of gains per rotation block
    gains = np.take(_gain_table(lo, step, dtype), gcodes.T,
                    out=km.scratch("gains", (n_blocks, n), np.float32))
    plan = []
    col = j = 0
    for seg, book in zip(layout, books, strict=True):
        size = seg.block_size
        for _ in range(seg.blocks):
            start = pos
            take(n * size * seg.bits // 8)
            plan.append((col, size, seg.bits, km.rotation(seed, size, j).T, book[0], start))
            col += size
            j += 1
    if pos != len(payload):
        raise _corrupt(f"{len(payload) - pos} trailing payload bytes")
    # |y| <= |v| <= sqrt(n) max|level| max gain: fp16 overflow is checked only where possible
    top_gain = gains.max(axis=1, initial=0.0).tolist()
    check = dtype == "float16" and any(
        math.sqrt(size) * book_max * top >= km.F16_SAFE
        for (_, size, *_), book_max, top in zip(plan, _books_per_block(layout, books), top_gain,
                                                  strict=True))
    rows = max(1, min(km.chunk_rows(d), n))
    src = np.frombuffer(payload, dtype=np.uint8)
    # the whole decoded block in a per-thread buffer: the returned bytes are the one fresh
    # allocation (fresh pages cost a fault each, ~1 ms per MiB on a busy machine)
    result = km.scratch("result", (n, d), np.uint16)
    stored = km.scratch("stored", (rows, d), np.uint16) if unperm is not None else result
    # per chunk, every rotation block's matmul writes its columns of one row-major float32
    # buffer (BLAS takes the row stride), so the conversion is one set of contiguous passes
    ybuf = km.scratch("y", (rows, d), np.float32)
    sign = km.scratch("sign", (rows, d), np.uint16)
    vbufs = {size: km.scratch(f"vals{size}", (rows, size), np.float32) for _, size, *_ in plan}
    for r0 in range(0, n, rows):
        m = min(rows, n - r0)
        y = ybuf[:m]
        for j, (col, size, bits, rot_t, levels, start) in enumerate(plan):
            vals = km.dequantize(src, start + r0 * size * bits // 8, m, size, bits, levels,
                                 out=vbufs[size][:m])
            vals *= gains[j, r0:r0 + m, None]
            np.matmul(vals, rot_t, out=y[:, col:col + size])
        # channels in stored (for a permuted block: permuted) order
        words = stored[:m] if unperm is not None else result[r0:r0 + m]
        km.from_f32(y, dtype, prescaled=True, out=words, check=check, truncate=True,
                    sign=sign[:m])
        if unperm is not None:
            g, index = unperm
            wide = _WORD_TYPES[g]
            np.take(words.view(wide), index, axis=1, mode="clip",
                    out=result[r0:r0 + m].view(wide))
    return result.tobytes()


_WORD_TYPES = {1: np.uint16, **dict(_WORDS)}


def _books_per_block(layout: list[Segment], books: list[tuple[npt.NDArray[np.float32], float]],
                     ) -> list[float]:
    """Each rotation block's largest codebook magnitude."""
    return [book[1] for seg, book in zip(layout, books, strict=True) for _ in range(seg.blocks)]
