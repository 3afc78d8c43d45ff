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

import numpy as np
import numpy.typing as npt

from s3kv.errors import InvalidInput
from s3kv.store.codecs import kvq_math as km
from s3kv.store.codecs import kvq_native
from s3kv.store.codecs.kvq_decode import decode
from s3kv.store.codecs.kvq_format import (
    CODEC_ID,
    DTYPES,
    FLAG_PERMUTED,
    GAIN_RANGE,
    HEADER,
    LAYOUTS,
    MAGIC,
    MAX_ABS,
    VERSION,
    Segment,
    perm_dtype,
)
from s3kv.store.codecs.spec import CodecSpec
from s3kv.store.layout import checksum

__all__ = ["CODEC_ID", "KvqCodec", "Segment", "bound", "decode", "expected_error",
           "layouts_for"]


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


#: the encoder keeps aligned groups of this many adjacent channels together when it ranks
#: channels by energy (the decoder then undoes the order with 64- or 32-bit word gathers,
#: 2-4x cheaper than 16-bit ones), in this order of preference ...
GROUPS = (4, 2)
#: ... if that costs at most this much expected error relative to ranking single channels
GROUP_TOLERANCE = 0.05


def grouped_order(energy: npt.NDArray[np.float64], g: int) -> npt.NDArray[np.intp]:
    """Channels in descending energy of their aligned groups of ``g``, each group in order."""
    ranks = np.argsort(-energy.reshape(-1, g).sum(axis=1), kind="stable")
    out: npt.NDArray[np.intp] = (ranks[:, None] * g + np.arange(g)).reshape(-1)
    return out


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

    def _choose_layout(self, energy_sorted: npt.NDArray[np.float64],
                       ) -> tuple[tuple[Segment, ...], float]:
        """The layout of least expected_error, from one cumulative sum of the energies
        (in the order given: the first segment takes the first channels), and that error."""
        cum = np.concatenate([[0.0], np.cumsum(energy_sorted)]).tolist()
        total = cum[-1] or 1.0
        best, best_err = self.layouts[0], math.inf
        for layout, ends in self._layout_ends:
            err = sum((cum[end] - cum[start]) * dist for start, end, dist in ends) / total
            if err < best_err:
                best, best_err = layout, err
        return best, best_err

    def _order_and_layout(self, energy: npt.NDArray[np.float64],
                          ) -> tuple[npt.NDArray[np.intp], tuple[Segment, ...], int]:
        """The channel ranking, the layout for a block's channel energies, and the size of
        the aligned channel groups the ranking keeps together (1: none)."""
        order = np.argsort(-energy, kind="stable")
        layout, err = self._choose_layout(energy[order])
        if len(layout) == 1:  # uniform: the order is not used
            return order, layout, 1
        for g in GROUPS:
            if len(energy) % (8 * g) == 0:
                grouped = grouped_order(energy, g)
                lay, lay_err = self._choose_layout(energy[grouped])
                if len(lay) > 1 and lay_err <= err * (1.0 + GROUP_TOLERANCE):
                    return grouped, lay, g
        return order, layout, 1

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
        nat = kvq_native.native
        f16 = self.dtype == "float16"

        def to_f32(w: npt.NDArray[np.uint16], out: npt.NDArray[np.float32],
                   ) -> npt.NDArray[np.float32]:
            if nat is None:
                return km.to_f32(w, self.dtype, out=out)
            nat.widen(w, f16, out)
            return out

        for r0 in range(0, n, rows):
            x = to_f32(words[r0:r0 + rows],
                       xfull[r0:r0 + rows] if keep else xfull[:len(words[r0:r0 + rows])])
            top, bottom = float(x.max()), float(x.min())
            if not (top < limit and bottom > -limit):
                if self.dtype == "float16" or not (math.isfinite(top) and math.isfinite(bottom)):
                    raise InvalidInput("kvq block holds NaN or infinite values")
                raise InvalidInput("kvq block holds values beyond +-2**60; store it lossless")
            part = np.einsum("ij,ij->j", x, x)
            if not np.isfinite(part).all():  # bf16 near 2**60 overflows float32 sums
                part = np.einsum("ij,ij->j", x, x, dtype=np.float64)
            energy += part
        order, layout, group = self._order_and_layout(energy)
        permuted = len(layout) > 1
        if permuted:
            perm = np.concatenate([np.sort(order[s:s + g.channels]) for s, g in
                                   zip(np.cumsum([0] + [g.channels for g in layout]), layout,
                                       strict=False)])
        else:
            perm = np.arange(d)
        # the encoder gathers channels by whole groups: ``group`` float32s as one word
        wide = {1: np.float32, 2: np.uint64, 4: np.complex128}[group]
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
                x = to_f32(w, xfull[:len(w)])
            m = x.shape[0]
            norm = km.scratch("norm", (m,), np.float32)
            inv = km.scratch("inv", (m,), np.float32)
            for j, (col, size, bits, rot, off) in enumerate(plan):
                if permuted:  # this block's channels, gathered contiguous (by groups)
                    xb = km.scratch("xb", (m, size), np.float32)
                    np.take(x.view(wide), perm[col:col + size:group] // group, axis=1,
                            mode="clip", out=xb.view(wide))
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
                start = off + r0 * size * bits // 8
                packed = codes_out[start:start + m * size * bits // 8]
                if nat is not None:
                    table, offset = km.code_table(size, bits)
                    nat.quantize_pack(z, inv, size, offset, table, bits, packed)
                    continue
                codes = km.quantize(z, inv, size, bits, km.scratch("codes", (m, size), np.uint8))
                km.pack_into(codes, bits, packed)
        gain_codes, lo, step = _code_gains(gains)
        head = [perm.astype(perm_dtype(d)).tobytes()] if permuted else []
        head.append(b"".join(struct.pack("<HBB", g.channels, g.bits, g.blocks) for g in layout))
        head.extend(km.codebook(g.block_size, g.bits)[0].astype("<f2").tobytes() for g in layout)
        head.append(struct.pack("<dd", lo, step))
        head.append(gain_codes.tobytes())
        payload = b"".join([*head, codes_out.data])
        bits2 = int(self.bits * 2)
        fields = (MAGIC, VERSION, DTYPES[self.dtype], d, bits2, len(layout),
                  FLAG_PERMUTED if permuted else 0, 0, 0, self.seed, len(mv), len(payload),
                  checksum(payload))
        header = HEADER.pack(*fields, 0)[:-4]
        return header + struct.pack("<I", checksum(header)) + payload

    # -- decode ---------------------------------------------------------------------------
    def decode(self, data: bytes | memoryview, raw_length: int | None = None) -> bytes:
        return decode(data, raw_length)


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
