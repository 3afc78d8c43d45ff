"""kvq's non-BLAS loops in C (_kvq_native.c). Buffers are C-contiguous bytes-like objects;
each function writes its last buffer argument ``out`` and checks every size first."""

from typing import Any, TypeAlias

import numpy.typing as npt

_Buf: TypeAlias = bytes | bytearray | memoryview | npt.NDArray[Any]

def dequantize(src: _Buf, start: int, rows: int, n: int, bits: int, levels: _Buf,
               gcodes: _Buf, gstart: int, gstride: int, table: _Buf, out: _Buf) -> None:
    """out[r, c] = levels[code r, c] * table[gcodes[gstart + r * gstride]] (float32) for the
    rows x n codes of ``bits`` bits packed from src[start]."""

def narrow(y: _Buf, rows: int, d: int, f16: bool, out: _Buf, index: _Buf | None,
           g: int) -> None:
    """float32 rows x d (fp16: prescaled) to fp16/bf16 words by truncation, like
    kvq_math.from_f32(prescaled=True, truncate=True, check=False); with ``index`` (int64)
    output group k of g channels is stored group index[k]."""

def widen(words: _Buf, f16: bool, out: _Buf) -> None:
    """fp16/bf16 words to float32, like kvq_math.to_f32 for every finite word."""

def quantize_pack(z: _Buf, inv: _Buf, n: int, offset: float, table: _Buf, bits: int,
                  out: _Buf) -> None:
    """kvq_math.quantize then pack_into, for rows x n values (rows = len(inv))."""

def simd(enable: bool = ..., /) -> bool:
    """Whether the AVX2 loops run; ``enable`` turns them off (or back on if the CPU has
    AVX2 and F16C)."""
