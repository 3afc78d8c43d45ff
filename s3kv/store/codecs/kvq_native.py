"""kvq's compiled loops (``_kvq_native.c``, built by setup.py), when they are there.

The C kernels compute exactly what the numpy path computes (the same float32 operations in
the same order, the same integer conversions), so a block encodes and decodes to the same
bytes either way; the numpy path runs when the extension is not built, or with
``S3KV_KVQ_NATIVE=0`` in the environment. The rotations are numpy matmuls (BLAS) in both.
"""

from __future__ import annotations

import os
from typing import Any, Protocol, TypeAlias

import numpy.typing as npt

_Buf: TypeAlias = bytes | bytearray | memoryview | npt.NDArray[Any]


class Native(Protocol):
    """The extension module's functions (documented in _kvq_native.pyi)."""

    def dequantize(self, src: _Buf, start: int, rows: int, n: int, bits: int, levels: _Buf,
                   gcodes: _Buf, gstart: int, gstride: int, table: _Buf, out: _Buf) -> None: ...

    def narrow(self, y: _Buf, rows: int, d: int, f16: bool, out: _Buf, index: _Buf | None,
               g: int) -> None: ...

    def widen(self, words: _Buf, f16: bool, out: _Buf) -> None: ...

    def quantize_pack(self, z: _Buf, inv: _Buf, n: int, offset: float, table: _Buf,
                      bits: int, out: _Buf) -> None: ...

    def simd(self, enable: bool = ..., /) -> bool: ...


def load() -> Native | None:
    """The extension, or None when it is not built or S3KV_KVQ_NATIVE=0."""
    if os.environ.get("S3KV_KVQ_NATIVE", "1") == "0":
        return None
    try:
        from s3kv.store.codecs import _kvq_native
    except ImportError:
        return None
    return _kvq_native


#: the kernels in use, or None for the numpy path; the encoder and decoder read this at
#: every call, so tests and benchmarks can swap it
native: Native | None = load()
