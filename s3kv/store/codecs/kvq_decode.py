"""The ``kvq`` decoder: any valid version-2 block back to its fp16/bf16 words, or an
IntegrityError (never garbage). The format is in docs/codecs.md; the encoder is kvq.py."""

from __future__ import annotations

import math
import struct
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from s3kv.errors import IntegrityError
from s3kv.store.codecs import kvq_math as km
from s3kv.store.codecs import kvq_native
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
from s3kv.store.layout import checksum

#: the un-permutation moves the widest words (of up to this many channels) whose channel
#: groups the order keeps together
_WIDEST = 4
_WORD_TYPES: dict[int, type[np.unsignedinteger[Any]]] = {1: np.uint16, 2: np.uint32,
                                                         4: np.uint64}


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
    perm = np.frombuffer(raw, dtype=perm_dtype(d)).astype(np.intp)
    inverse = np.full(d, -1, dtype=np.intp)
    inverse[perm] = np.arange(d)  # an entry >= d is an IndexError: corrupt
    if len(perm) != d or int(inverse.min()) < 0:
        raise _corrupt("channel order is not a permutation")
    best, out = 1, inverse
    for g in (2, 4):  # an order grouped by 4 is grouped by 2 too
        if g > _WIDEST or d % g:
            break
        rows = perm.reshape(-1, g)  # each an aligned group, in order?
        if not (rows == (rows[:, :1] & -g) + _STEPS[g]).all():
            break
        best, out = g, inverse[::g] >> (g // 2)
    out.setflags(write=False)
    return best, out


_STEPS = {g: np.arange(g) for g in (2, 4)}


def _corrupt(what: str) -> IntegrityError:
    return IntegrityError(f"kvq block is corrupt: {what}")


def decode(data: bytes | memoryview, raw_length: int | None = None) -> bytes:
    """Decode a kvq block; IntegrityError on anything malformed (never garbage), or whose
    header's raw length is not ``raw_length`` (its entry's, when given)."""
    mv = memoryview(data).cast("B")
    if len(mv) < HEADER.size:
        raise _corrupt(f"{len(mv)} bytes is shorter than the {HEADER.size}-byte header")
    fields = HEADER.unpack_from(mv)
    (magic, version, dtype_id, d, bits2, n_seg, flags, _r1, _r2, seed, raw_len, pay_len,
     pay_crc, head_crc) = fields
    if magic != MAGIC:
        raise _corrupt("bad magic")
    if checksum(mv[:HEADER.size - 4]) != head_crc:
        raise _corrupt("header checksum mismatch")
    if version != VERSION:
        raise _corrupt(f"unknown format version {version}")
    if raw_length is not None and raw_len != raw_length:
        raise _corrupt(f"header says {raw_len} bytes, the entry {raw_length}")
    if pay_len != len(mv) - HEADER.size:
        raise _corrupt(f"payload is {len(mv) - HEADER.size} bytes, header says {pay_len}")
    payload = mv[HEADER.size:]
    if checksum(payload) != pay_crc:
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


#: per rotation block: first channel, size, bits, R^T, codebook levels
_Block = tuple[int, int, int, npt.NDArray[np.float32], npt.NDArray[np.float32]]


@lru_cache(maxsize=64)
def _static(head: bytes, d: int, n_seg: int, seed: int) -> tuple[tuple[_Block, ...], float]:
    """The segment table and codebooks (the part of a payload after the channel order that
    does not depend on the number of vectors), checked and parsed once per distinct one: the
    rotation blocks, and the largest sqrt(size) * |level| of any block."""
    pos = 0
    layout = []
    for _ in range(n_seg):
        ch, bits, blocks = struct.unpack_from("<HBB", head, pos)
        pos += 4
        seg = Segment(ch, bits)
        if not 1 <= bits <= 8 or ch == 0 or ch % 8 or seg.blocks != blocks:
            raise _corrupt("bad segment table")
        layout.append(seg)
    if sum(g.channels for g in layout) != d:
        raise _corrupt("segments do not cover head_dim")
    plan: list[_Block] = []
    col = j = 0
    reach = 0.0
    for seg in layout:
        levels, top = _book(head[pos:pos + (2 << seg.bits)])
        pos += 2 << seg.bits
        size = seg.block_size
        reach = max(reach, math.sqrt(size) * top)
        for _ in range(seg.blocks):
            plan.append((col, size, seg.bits, km.rotation(seed, size, j).T, levels))
            col += size
            j += 1
    if pos != len(head):
        raise _corrupt("codebooks do not match the segment table")
    return tuple(plan), reach


def _decode_payload(payload: memoryview, dtype: str, d: int, n_seg: int, permuted: bool,
                    seed: int, n: int) -> bytes:
    # the fixed-size sections: channel order, segment table (bits at byte 2 of each entry)
    # and one codebook of 2**bits float16 levels per segment
    first = np.dtype(perm_dtype(d)).itemsize * d if permuted else 0
    if first + 4 * n_seg > len(payload):
        raise _corrupt("payload shorter than its sections")
    seg_bits = [payload[first + 4 * i + 2] for i in range(n_seg)]
    if not all(1 <= b <= 8 for b in seg_bits):
        raise _corrupt("bad segment table")
    pos = first + 4 * n_seg + sum(2 << b for b in seg_bits)
    if pos + 16 > len(payload):
        raise _corrupt("payload shorter than its sections")
    unperm = _unpermutation(bytes(payload[:first]), d) if permuted else None
    plan, reach = _static(bytes(payload[first:pos]), d, n_seg, seed)
    lo, step = struct.unpack_from("<dd", payload, pos)
    pos += 16
    n_blocks = len(plan)
    starts = []
    end = pos + n * n_blocks
    for _, size, bits, *_ in plan:
        starts.append(end)
        end += n * size * bits // 8
    if end != len(payload):
        raise _corrupt(f"payload is {len(payload)} bytes, its sections {end}")
    gcodes = np.frombuffer(payload[pos:pos + n * n_blocks], dtype=np.uint8).reshape(n, n_blocks)
    table = _gain_table(lo, step, dtype)
    nat = kvq_native.native
    # one contiguous row of gains per rotation block (the C kernel reads the codes itself)
    gains = None if nat is not None else np.take(
        table, gcodes.T, out=km.scratch("gains", (n_blocks, n), np.float32))
    # |y| <= |v| <= sqrt(size) max|level| gain (gains grow with their codes): fp16 overflow
    # is checked only where it is possible
    check = dtype == "float16" and n > 0 and reach * float(table[gcodes.max()]) >= km.F16_SAFE
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
    blocks = [(*block, start) for block, start in zip(plan, starts, strict=True)]
    for r0 in range(0, n, rows):
        m = min(rows, n - r0)
        y = ybuf[:m]
        for j, (col, size, bits, rot_t, levels, start) in enumerate(blocks):
            vals = vbufs[size][:m]
            first = start + r0 * size * bits // 8
            if gains is None:
                assert nat is not None
                nat.dequantize(src, first, m, size, bits, levels, gcodes, r0 * n_blocks + j,
                               n_blocks, table, vals)
            else:
                km.dequantize(src, first, m, size, bits, levels, out=vals)
                vals *= gains[j, r0:r0 + m, None]
            np.matmul(vals, rot_t, out=y[:, col:col + size])
        if nat is not None and not check:  # one pass: words, in channel order
            g, index = unperm if unperm is not None else (1, None)
            nat.narrow(y, m, d, dtype == "float16", result[r0:r0 + m], index, g)
            continue
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
