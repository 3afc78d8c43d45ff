"""``kvq``: lossy KV-cache quantization (random rotation + Lloyd-Max scalar codes).

Per block: the channels of the head dimension are split into segments by energy (mixed
precision keeps the highest-energy channels at more bits), each segment into rotation blocks
of at most 64 channels. Each rotation block of each vector is rotated by a seeded random
orthogonal matrix, normalised to unit variance per coordinate (its gain kept as a log-coded
byte), and every coordinate quantized with a Lloyd-Max codebook fit for the rotated
distribution, then bit-packed. The byte format is in docs/codecs.md.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from s3kv.errors import IntegrityError, InvalidInput
from s3kv.store.codecs import kvq_math as km
from s3kv.store.codecs.spec import CodecSpec

CODEC_ID = 2
MAGIC = b"S3KQ"
#: 2: channel order as uint8 when head_dim <= 256, codebooks as float16 (1 had uint16 and
#: float32; no version-1 data was ever deployed, so only version 2 decodes)
VERSION = 2
HEADER = struct.Struct("<4sBBHBBBBIQQQII")  # 48 bytes; the last field is the header crc32
DTYPES = {"float16": 1, "bfloat16": 2}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
FLAG_PERMUTED = 1
MAX_ROTATION = 64
#: gains are coded in ln units over at most this range below the block's largest gain
GAIN_RANGE = 12.0
#: largest |value| kvq accepts: squares of 128+ such values still fit float32
MAX_ABS = 2.0**60


def _perm_dtype(d: int) -> str:
    """The channel order is stored in one byte per channel when head_dim allows."""
    return "u1" if d <= 256 else "<u2"

#: candidate layouts per effective bit width: (quarters of head_dim, bits) per segment, the
#: first segment holding the highest-energy channels. All candidates spend exactly the same
#: index bits; the encoder picks the one with the least expected error for the block.
LAYOUTS: dict[float, tuple[tuple[tuple[int, int], ...], ...]] = {
    2.0: (((4, 2),), ((2, 3), (2, 1))),
    2.5: (((1, 4), (3, 2)), ((2, 3), (2, 2))),
    3.0: (((4, 3),), ((2, 4), (2, 2)), ((1, 5), (1, 3), (2, 2))),
    3.5: (((1, 5), (3, 3)), ((2, 4), (2, 3))),
    4.0: (((4, 4),), ((2, 5), (2, 3))),
}


@dataclass(frozen=True)
class Segment:
    channels: int
    bits: int

    @property
    def blocks(self) -> int:
        """Rotation blocks: the fewest of equal size <= 64 that is a multiple of 8."""
        m = -(-self.channels // MAX_ROTATION)
        while self.channels % (8 * m):
            m += 1
        return m

    @property
    def block_size(self) -> int:
        return self.channels // self.blocks


def layouts_for(bits: float, head_dim: int) -> list[tuple[Segment, ...]]:
    """Candidate layouts for a head dimension. Each rotation block costs one gain byte per
    vector, so a layout may not use more rotation blocks than the fewest any candidate needs:
    mixed precision never buys quality with side information the ratio then pays for (at
    head_dim 64 that leaves 3 and 4 bits uniform; at 128 it drops the three-segment 3-bit
    layout)."""
    out = []
    for cand in LAYOUTS[float(bits)]:
        if len(cand) > 1 and head_dim % 32:
            continue
        out.append(tuple(Segment(q * head_dim // 4, b) for q, b in cand))
    fewest = min(sum(seg.blocks for seg in lay) for lay in out)
    return [lay for lay in out if sum(seg.blocks for seg in lay) == fewest]


def expected_error(layout: tuple[Segment, ...], energy_sorted: npt.NDArray[np.float64]) -> float:
    """Expected relative MSE of a layout given per-channel energies sorted descending."""
    total = float(energy_sorted.sum()) or 1.0
    err, start = 0.0, 0
    for seg in layout:
        frac = float(energy_sorted[start:start + seg.channels].sum()) / total
        err += frac * km.codebook(seg.block_size, seg.bits)[2]
        start += seg.channels
    return err


def bound(bits: float) -> float:
    """Documented bound on a block's relative MSE |x - x'|^2 / |x|^2 at head_dim >= 64:
    the worst candidate-free case (energy spread evenly) plus margin for gain coding."""
    layout = layouts_for(bits, 128)
    even = min(expected_error(lay, np.ones(128)) for lay in layout)
    return 1.15 * even + 0.002


class KvqCodec:
    codec_id = CODEC_ID

    def __init__(self, spec: CodecSpec) -> None:
        if spec.name != "kvq" or not spec.shaped:
            raise InvalidInput("kvq needs dtype and head_dim (x-s3kv-dtype, x-s3kv-head-dim)")
        self.spec = spec
        self.dtype = spec.dtype
        self.head_dim = spec.head_dim
        self.bits = float(spec.bits)
        self.seed = spec.seed
        self.layouts = layouts_for(self.bits, self.head_dim)
        # per layout: (first, end, expected distortion) of each segment in energy rank order
        self._layout_ends = []
        for layout in self.layouts:
            ends, start = [], 0
            for seg in layout:
                ends.append((start, start + seg.channels,
                             km.codebook(seg.block_size, seg.bits)[2]))
                start += seg.channels
            self._layout_ends.append((layout, ends))

    def _choose_layout(self, energy_sorted: npt.NDArray[np.float64]) -> tuple[Segment, ...]:
        """The layout of least expected_error, from one cumulative sum of the energies."""
        cum = np.concatenate([[0.0], np.cumsum(energy_sorted)]).tolist()
        total = cum[-1] or 1.0
        best, best_err = self.layouts[0], math.inf
        for layout, ends in self._layout_ends:
            err = sum((cum[end] - cum[start]) * dist for start, end, dist in ends) / total
            if err < best_err:
                best, best_err = layout, err
        return best

    # -- encode ---------------------------------------------------------------------------
    def encode(self, data: bytes | memoryview) -> bytes:
        d = self.head_dim
        mv = memoryview(data).cast("B")
        if len(mv) % (2 * d):
            raise InvalidInput(f"kvq block of {len(mv)} bytes is not a whole number of "
                               f"{self.dtype} vectors of head_dim {d} ({2 * d} bytes each)")
        n = len(mv) // (2 * d)
        words = np.frombuffer(mv, dtype="<u2").reshape(n, d)
        rows = km.chunk_rows(d)
        # pass 1: range checks on the bit patterns, channel energies
        energy = np.zeros(d, dtype=np.float64)
        # fp16 Inf/NaN words convert to finite values of magnitude >= 2**16 (to_f32), bf16
        # ones to Inf/NaN: the chunk's max and min catch both, and bf16 values past 2**60
        limit = 2.0**16 if self.dtype == "float16" else MAX_ABS
        # the float32 block, kept for pass 2 (re-converting costs more than re-reading) unless
        # that would hold more than KEEP_FLOAT_ELEMS floats per thread
        keep = n * d <= km.KEEP_FLOAT_ELEMS
        xfull = km.scratch("x", (n if keep else rows, d), np.float32)
        for r0 in range(0, n, rows):
            x = km.to_f32(words[r0:r0 + rows], self.dtype,
                          out=xfull[r0:r0 + rows] if keep else xfull[:len(words[r0:r0 + rows])])
            top, bottom = float(x.max()), float(x.min())
            if not (top < limit and bottom > -limit):
                if self.dtype == "float16" or not (math.isfinite(top) and math.isfinite(bottom)):
                    raise InvalidInput("kvq block holds NaN or infinite values")
                raise InvalidInput("kvq block holds values beyond +-2**60; store it lossless")
            part = np.einsum("ij,ij->j", x, x)
            if not np.isfinite(part).all():  # bf16 near 2**60 overflows float32 sums
                part = np.einsum("ij,ij->j", x, x, dtype=np.float64)
            energy += part
        order = np.argsort(-energy, kind="stable")
        layout = self._choose_layout(energy[order])
        permuted = len(layout) > 1
        if permuted:
            perm = np.concatenate([np.sort(order[s:s + g.channels]) for s, g in
                                   zip(np.cumsum([0] + [g.channels for g in layout]), layout,
                                       strict=False)])
        else:
            perm = np.arange(d)
        # rotation blocks: (first channel, size, bits, rotation, codebook scale, code offset)
        plan = []
        col = j = off = 0
        for seg in layout:
            size = seg.block_size
            for _ in range(seg.blocks):
                plan.append((col, size, seg.bits, km.rotation(self.seed, size, j), off))
                off += n * size * seg.bits // 8
                col += size
                j += 1
        n_blocks = j
        codes_out = km.scratch("codes-out", (off,), np.uint8)
        gains = np.empty((n, n_blocks), dtype=np.float32)
        # pass 2: per chunk of vectors, rotate, normalise, quantize and pack every block
        for r0 in range(0, n, rows):
            if keep:
                x = xfull[r0:r0 + rows]
            else:
                w = words[r0:r0 + rows]
                x = km.to_f32(w, self.dtype, out=xfull[:len(w)])
            m = x.shape[0]
            norm = km.scratch("norm", (m,), np.float32)
            inv = km.scratch("inv", (m,), np.float32)
            for j, (col, size, bits, rot, off) in enumerate(plan):
                if permuted:  # this block's channels, gathered contiguous
                    xb = np.take(x, perm[col:col + size], axis=1, mode="clip",
                                 out=km.scratch("xb", (m, size), np.float32))
                else:
                    xb = x[:, col:col + size]
                z = np.matmul(xb, rot, out=km.scratch("z", (m, size), np.float32))
                np.einsum("ij,ij->i", z, z, out=norm)
                np.sqrt(norm, out=norm)
                scale = math.sqrt(size)
                np.divide(norm, np.float32(scale), out=gains[r0:r0 + m, j])
                # a zero row (gain 0: decoded as zeros whatever its codes) divides by 2e-36,
                # the least norm whose inverse stays finite
                np.maximum(norm, np.float32(2e-36), out=inv)
                np.divide(np.float32(scale * km.GRID), inv, out=inv)
                codes = km.quantize(z, inv, size, bits, km.scratch("codes", (m, size), np.uint8))
                start = off + r0 * size * bits // 8
                km.pack_into(codes, bits, codes_out[start:start + m * size * bits // 8])
        gain_codes, lo, step = _code_gains(gains)
        head = [perm.astype(_perm_dtype(d)).tobytes()] if permuted else []
        head.append(b"".join(struct.pack("<HBB", g.channels, g.bits, g.blocks) for g in layout))
        head.extend(km.codebook(g.block_size, g.bits)[0].astype("<f2").tobytes() for g in layout)
        head.append(struct.pack("<dd", lo, step))
        head.append(gain_codes.tobytes())
        payload = b"".join([*head, codes_out.data])
        bits2 = int(self.bits * 2)
        fields = (MAGIC, VERSION, DTYPES[self.dtype], d, bits2, len(layout),
                  FLAG_PERMUTED if permuted else 0, 0, 0, self.seed, len(mv), len(payload),
                  zlib.crc32(payload))
        header = HEADER.pack(*fields, 0)[:-4]
        return header + struct.pack("<I", zlib.crc32(header)) + payload

    # -- decode ---------------------------------------------------------------------------
    def decode(self, data: bytes | memoryview) -> bytes:
        return decode(data)


def _code_gains(gains: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.uint8], float, float]:
    """Gains to bytes: 0 is zero, 1..255 are ln-spaced over [lo, lo + 254*step]."""
    pos = gains > 0
    if not pos.any():
        return np.zeros(gains.shape, dtype=np.uint8), 0.0, 0.0
    ln = np.log(np.where(pos, gains, 1).astype(np.float64))
    hi = float(ln[pos].max())
    lo = max(float(ln[pos].min()), hi - GAIN_RANGE)
    step = (hi - lo) / 254.0
    q = np.ones(gains.shape) if step == 0 else np.rint((ln - lo) / step) + 1
    codes = np.where(pos, np.clip(q, 1, 255), 0).astype(np.uint8)
    return codes, lo, step


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

    perm = None
    if permuted:
        width = np.dtype(_perm_dtype(d)).itemsize
        perm = np.frombuffer(take(width * d), dtype=_perm_dtype(d))
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
    gains = _gain_table(lo, step, dtype)[gcodes]
    plan = []
    col = j = 0
    for seg, book in zip(layout, books, strict=True):
        size = seg.block_size
        for _ in range(seg.blocks):
            start = pos
            take(n * size * seg.bits // 8)
            plan.append((col, size, seg.bits, km.rotation(seed, size, j).T, book, start))
            col += size
            j += 1
    if pos != len(payload):
        raise _corrupt(f"{len(payload) - pos} trailing payload bytes")
    # |y| <= |v| <= sqrt(n) max|level| max gain: fp16 overflow is checked only where possible
    top_gain = gains.max(axis=0, initial=0.0).tolist()
    check = [dtype == "float16" and math.sqrt(size) * book[1] * top_gain[j] >= km.F16_SAFE
             for j, (_, size, _, _, book, _) in enumerate(plan)]
    blocks_plan = [(col, size, bits, rot_t, book[0], start)
                   for col, size, bits, rot_t, book, start in plan]
    inverse = None
    if perm is not None:
        inverse = np.full(d, -1, dtype=np.intp)
        inverse[perm] = np.arange(d)  # an entry >= d is an IndexError: corrupt
        if int(inverse.min()) < 0:
            raise _corrupt("channel order is not a permutation")
    rows = max(1, min(km.chunk_rows(d), n))
    src = np.frombuffer(payload, dtype=np.uint8)
    # the whole decoded block in a per-thread buffer: the returned bytes are the one fresh
    # allocation (fresh pages cost a fault each, ~1 ms per MiB on a busy machine)
    result = km.scratch("result", (n, d), np.uint16)
    stored = km.scratch("stored", (rows, d), np.uint16) if inverse is not None else result
    # per chunk, every rotation block's output lands block after block in one float32 buffer
    # (rows x size each, contiguous for matmul) so the conversion is one set of passes
    ybm = km.scratch("ybm", (rows * d,), np.float32)
    wbm = km.scratch("wbm", (rows * d,), np.uint16)
    sign = km.scratch("sign", (rows * d,), np.uint16)
    vbufs = {size: km.scratch(f"vals{size}", (rows, size), np.float32)
             for _, size, *_ in blocks_plan}
    any_check = any(check)
    # with blocks of one size, the conversion writes straight into the channel-ordered words
    # through a (blocks, rows, size) view of them; otherwise block by block, by copies
    sizes = {size for _, size, *_ in blocks_plan}
    for r0 in range(0, n, rows):
        m = min(rows, n - r0)
        for (col, size, bits, rot_t, levels, start), g in zip(blocks_plan, gains[r0:r0 + m].T,
                                                             strict=True):
            vals = km.dequantize(src, start + r0 * size * bits // 8, m, size, bits, levels,
                                 out=vbufs[size][:m])
            vals *= g[:, None]
            np.matmul(vals, rot_t, out=ybm[m * col:m * (col + size)].reshape(m, size))
        # channels in stored (for a permuted block: permuted) order
        words = stored[:m] if inverse is not None else result[r0:r0 + m]
        if len(sizes) == 1:
            size = blocks_plan[0][1]
            target = words.reshape(m, d // size, size).transpose(1, 0, 2)
        else:
            target = wbm[:m * d]
        km.from_f32(ybm[:m * d].reshape(target.shape), dtype, prescaled=True, out=target,
                    check=any_check, truncate=True, sign=sign[:m * d].reshape(target.shape))
        if len(sizes) > 1:
            for col, size, *_ in blocks_plan:
                np.copyto(words[:, col:col + size],
                          wbm[m * col:m * (col + size)].reshape(m, size))
        if inverse is not None:
            np.take(words, inverse, axis=1, mode="clip", out=result[r0:r0 + m])
    return result.tobytes()
