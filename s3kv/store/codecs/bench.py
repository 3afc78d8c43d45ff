"""Codec quality and speed measurement behind ``s3kv codec-bench``."""

from __future__ import annotations

import csv
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from s3kv.store.codecs.base import codec_for, decode_any
from s3kv.store.codecs.spec import CodecSpec, parse_codec_spec
from s3kv.store.codecs.synth import F32, from_words, to_words

__all__ = ["F32", "Row", "load_npy", "load_reference", "measure", "render_table", "run"]

DEFAULT_CODECS = ("none", "zstd:level=1,shuffle=0", "zstd:level=3,shuffle=1",
                  "kvq:bits=2", "kvq:bits=2.5", "kvq:bits=3", "kvq:bits=3.5", "kvq:bits=4")


@dataclass
class Row:
    source: str
    codec: str
    effective_bits: float | None  # kvq index bits per element
    stored_bits: float            # all stored bits per element (headers, gains, tables too)
    ratio: float
    cosine_mean: float
    cosine_worst_block: float
    rel_mse: float
    encode_mb_s: float            # input MB per CPU-second (per core)
    decode_mb_s: float
    ref_ratio: float | None = None
    ref_cosine: float | None = None

    def meets_reference(self) -> bool | None:
        if self.ref_ratio is None or self.ref_cosine is None:
            return None
        return self.ratio >= self.ref_ratio and self.cosine_mean >= self.ref_cosine

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["meets_reference"] = self.meets_reference()
        return d


def load_reference(path: Path | None) -> dict[float, tuple[float, float]]:
    """effective_bits -> (compression_ratio, cosine_similarity) from the reference CSV."""
    if path is None or not path.is_file():
        return {}
    out = {}
    with path.open(newline="") as fh:
        for rec in csv.DictReader(fh):
            try:
                out[float(rec["effective_bits"])] = (float(rec["compression_ratio"]),
                                                    float(rec["cosine_similarity"]))
            except (KeyError, ValueError):
                continue
    return out


def _cosines(a: F32, b: F32) -> F32:
    dot = np.einsum("ij,ij->i", a, b, dtype=np.float64)
    na = np.sqrt(np.einsum("ij,ij->i", a, a, dtype=np.float64))
    nb = np.sqrt(np.einsum("ij,ij->i", b, b, dtype=np.float64))
    both = (na > 0) & (nb > 0)
    cos = np.where(both, dot / np.where(both, na * nb, 1.0), (na == 0) & (nb == 0))
    out: F32 = cos.astype(np.float32)
    return out


def measure(spec: CodecSpec, blocks: Sequence[F32], dtype: str, source: str,
            repeat: int = 1, reference: dict[float, tuple[float, float]] | None = None) -> Row:
    """Encode and decode every block once untimed, then ``repeat`` timed times; quality from
    the last round."""
    d = blocks[0].shape[1]
    if spec.name == "kvq":
        spec = CodecSpec("kvq", dtype=dtype, head_dim=d, bits=spec.bits, seed=spec.seed)
    codec = codec_for(spec)
    raws = [to_words(b, dtype) for b in blocks]
    raw_total = sum(len(r) for r in raws)
    enc_cpu = dec_cpu = 0.0
    # one untimed round first: per-process one-time work (codebook fitting, rotation matrices,
    # lookup tables, per-thread scratch buffers; all cached for the process's life, as in a
    # running gateway) is not throughput
    encoded: list[bytes] = [codec.encode(r) for r in raws]
    for e in encoded:
        decode_any(codec.codec_id, e)
    for _ in range(max(1, repeat)):
        t0 = time.process_time()
        encoded = [codec.encode(r) for r in raws]
        t1 = time.process_time()
        for e in encoded:
            # each result is dropped at once, as a server does once it has sent it: holding
            # every decoded block would time glibc handing megabytes back to the kernel and
            # faulting them in again (~0.6 ms per MiB here), not the codec
            decode_any(codec.codec_id, e)
        t2 = time.process_time()
        enc_cpu += t1 - t0
        dec_cpu += t2 - t1
    decoded = [decode_any(codec.codec_id, e) for e in encoded]  # quality, untimed
    enc_total = sum(len(e) for e in encoded)
    err = energy = 0.0
    cos_all: list[F32] = []
    worst = 1.0
    for raw, dec in zip(raws, decoded, strict=True):
        a = from_words(raw, dtype).reshape(-1, d)
        b = from_words(dec, dtype).reshape(-1, d)
        err += float(np.sum((a.astype(np.float64) - b) ** 2))
        energy += float(np.sum(a.astype(np.float64) ** 2))
        cos = _cosines(a, b)
        cos_all.append(cos)
        worst = min(worst, float(cos.mean()))
    mb = raw_total * max(1, repeat) / 1e6
    eff = float(spec.bits) if spec.name == "kvq" else None
    ref = (reference or {}).get(eff) if eff is not None else None
    label = spec.render() if spec.name != "kvq" else f"kvq:bits={spec.bits:g}"
    return Row(source=source, codec=label,
               effective_bits=eff, stored_bits=16.0 * enc_total / raw_total,
               ratio=raw_total / enc_total, cosine_mean=float(np.concatenate(cos_all).mean()),
               cosine_worst_block=worst, rel_mse=err / energy if energy else 0.0,
               encode_mb_s=mb / max(enc_cpu, 1e-9), decode_mb_s=mb / max(dec_cpu, 1e-9),
               ref_ratio=ref[0] if ref else None, ref_cosine=ref[1] if ref else None)


def run(codecs: Sequence[str], sources: Sequence[tuple[str, list[F32]]], dtype: str,
        repeat: int = 1, reference: dict[float, tuple[float, float]] | None = None) -> list[Row]:
    specs = [parse_codec_spec(c) for c in codecs]
    return [measure(s, blocks, dtype, name, repeat, reference)
            for name, blocks in sources for s in specs]


def load_npy(path: Path, head_dim: int | None, block_vectors: int) -> list[F32]:
    """Any .npy array of floats; its last axis is head_dim unless given. Split into blocks."""
    with open(path, "rb") as fh:
        if fh.read(6) != b"\x93NUMPY":
            raise ValueError(f"{path} is no .npy file (numpy.save's format)")
    arr = np.load(path, allow_pickle=False)
    if arr.dtype.kind not in "fiu" and arr.dtype != np.float16:
        raise ValueError(f"{path}: dtype {arr.dtype} is not numeric")
    if arr.size == 0 or arr.ndim == 0:
        raise ValueError(f"{path}: an array of shape {arr.shape} holds no vectors")
    d = head_dim or int(arr.shape[-1])
    flat = np.asarray(arr, dtype=np.float32).reshape(-1)
    if flat.size % d:
        raise ValueError(f"{path}: {flat.size} elements are not a multiple of head_dim {d}")
    vecs = flat.reshape(-1, d)
    return [vecs[i:i + block_vectors] for i in range(0, len(vecs), block_vectors)]


def render_table(rows: Sequence[Row]) -> str:
    head = (f"{'source':<12} {'codec':<24} {'bits':>4} {'stored':>6} {'ratio':>6} "
            f"{'cos mean':>8} {'cos worst':>9} {'rel MSE':>8} {'enc MB/s':>8} {'dec MB/s':>8}"
            f"  {'ref ratio':>9} {'ref cos':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        bits = f"{r.effective_bits:g}" if r.effective_bits is not None else "-"
        ref = (f"  {r.ref_ratio:>8.1f}x {r.ref_cosine:>7.3f}" if r.ref_ratio is not None
               and r.ref_cosine is not None else "")
        lines.append(f"{r.source:<12} {r.codec:<24} {bits:>4} {r.stored_bits:>6.2f} "
                     f"{r.ratio:>5.2f}x {r.cosine_mean:>8.4f} {r.cosine_worst_block:>9.4f} "
                     f"{r.rel_mse:>8.5f} {r.encode_mb_s:>8.0f} {r.decode_mb_s:>8.0f}{ref}")
    return "\n".join(lines)
