"""kvq's compiled loops (``_kvq_native``) give exactly the numpy path's bytes: encoded blocks
and decoded words, every bit width, both dtypes, odd shapes, with and without the AVX2 loops."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from s3kv.store.codecs import KVQ_ID, CodecSpec, codec_for, decode_any, kvq_native
from s3kv.store.codecs import kvq_math as km
from s3kv.store.codecs.kvq_native import Native
from s3kv.store.codecs.synth import synthetic_blocks, to_words

BITS = (2.0, 2.5, 3.0, 3.5, 4.0)
DTYPES = ("float16", "bfloat16")


def test_extension_is_built() -> None:
    """pip install -e . compiles it wherever a C compiler is (CI's machine has gcc); the
    numpy fallback must not hide a broken build there."""
    if os.environ.get("S3KV_KVQ_NATIVE") == "0":
        pytest.skip("S3KV_KVQ_NATIVE=0")
    assert kvq_native.load() is not None


@pytest.fixture(params=["simd", "scalar"])
def nat(request: pytest.FixtureRequest) -> Iterator[Native]:
    """The extension with its AVX2 loops on, or off (the portable loops)."""
    built = kvq_native.load()
    if built is None:
        pytest.skip("the kvq extension is not built")
    simd = built.simd()
    if request.param == "simd" and not simd:
        pytest.skip("this CPU has no AVX2/F16C")
    built.simd(request.param == "simd")
    yield built
    built.simd(simd)


def _both(nat: Native, raw: bytes, spec: CodecSpec) -> None:
    """Encode and decode on both paths: the same bytes."""
    codec = codec_for(spec)
    kvq_native.native = None
    try:
        enc = codec.encode(raw)
        dec = decode_any(KVQ_ID, enc)
    finally:
        kvq_native.native = nat
    assert codec.encode(raw) == enc
    assert decode_any(KVQ_ID, enc) == dec


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bits", BITS)
def test_same_bytes_every_bit_width(nat: Native, dtype: str, bits: float) -> None:
    for x in synthetic_blocks(seed=9, layers=1, heads=3, tokens=333):  # K and V, 999 vectors
        _both(nat, to_words(x, dtype), CodecSpec("kvq", dtype=dtype, head_dim=128, bits=bits))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("d", "n"), [(128, 1), (128, 7), (64, 33), (96, 5), (256, 19),
                                      (320, 9), (32, 3)])
def test_same_bytes_odd_shapes(nat: Native, dtype: str, d: int, n: int) -> None:
    """Few vectors (one group of codes ending at the payload's end), other head dims,
    channel orders stored as uint16 (d > 256)."""
    rng = np.random.default_rng(d + n)
    x = rng.standard_normal((n, d)).astype(np.float32) * np.exp(rng.standard_normal(d))
    for bits in BITS:
        if bits % 1 and d % 32:
            continue
        _both(nat, to_words(x.astype(np.float32), dtype),
              CodecSpec("kvq", dtype=dtype, head_dim=d, bits=bits))


def test_same_bytes_chunked_and_near_fp16_overflow(nat: Native,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Ragged chunks; fp16 blocks near 65504, where the decoder checks for overflow (and
    converts with numpy), zero vectors and subnormals."""
    monkeypatch.setattr(km, "CHUNK_ELEMS", 128 * 100)
    monkeypatch.setattr(km, "KEEP_FLOAT_ELEMS", 1000)
    x = synthetic_blocks(seed=1, layers=1, heads=2, tokens=150)[0]
    big = x / np.abs(x).max() * 65000.0
    tiny = x * 2.0**-20
    x[::7] = 0.0
    for block in (x, big, tiny):
        for bits in BITS:
            _both(nat, to_words(block, "float16"),
                  CodecSpec("kvq", dtype="float16", head_dim=128, bits=bits))


@pytest.mark.parametrize("bits", range(1, 9))
def test_dequantize_kernel(nat: Native, bits: int) -> None:
    """Every code width the format allows (the encoder writes 1-5), codes ending at the very
    end of the buffer, gains looked up per row."""
    rng = np.random.default_rng(bits)
    rows, n = 5, 24
    codes = rng.integers(0, 1 << bits, rows * n).astype(np.uint8)
    packed = np.frombuffer(b"\x01\x02\x03" + km.pack(codes, bits), dtype=np.uint8)
    levels = np.sort(rng.standard_normal(1 << bits)).astype(np.float32)
    table = np.exp(rng.standard_normal(256)).astype(np.float32)
    gcodes = rng.integers(0, 256, (rows, 3)).astype(np.uint8)
    out = np.empty((rows, n), dtype=np.float32)
    nat.dequantize(packed, 3, rows, n, bits, levels, gcodes, 1, 3, table, out)
    expected = levels[codes].reshape(rows, n) * table[gcodes[:, 1]][:, None]
    assert np.array_equal(out, expected)
    with pytest.raises(ValueError):
        nat.dequantize(packed, 4, rows, n, bits, levels, gcodes, 1, 3, table, out)
    with pytest.raises(ValueError):
        nat.dequantize(packed, 3, rows, n, bits, levels, gcodes, 1, 3, table, out[:-1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("g", [1, 2, 4])
def test_narrow_and_widen_kernels(nat: Native, dtype: str, g: int) -> None:
    """narrow = from_f32(prescaled, truncate) then the un-permutation's gather, for every
    word and any channel order; widen = to_f32 for every finite word."""
    f16 = dtype == "float16"
    words = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    words = words[(words & 0x7FFF) < (0x7C00 if f16 else 0x7F80)][:64 * 500]
    x = km.to_f32(words, dtype)
    got = np.empty_like(x)
    nat.widen(words, f16, got)
    assert np.array_equal(got.view(np.uint32), x.view(np.uint32))
    y = (x * km.F16_SCALE if f16 else x).reshape(-1, 64)
    expected = km.from_f32(y.copy(), dtype, prescaled=True, truncate=True)
    out = np.empty_like(expected)
    nat.narrow(y, y.shape[0], 64, f16, out, None, 1)
    assert np.array_equal(out, expected)
    rng = np.random.default_rng(g)
    wide = {1: np.uint16, 2: np.uint32, 4: np.uint64}[g]
    split = rng.permutation(64 // g)  # an encoder's order: two ascending runs, or any
    for index in (rng.permutation(64 // g), np.argsort(np.concatenate(
            [np.sort(split[:16 // g]), np.sort(split[16 // g:])])), np.arange(64 // g)):
        nat.narrow(y, y.shape[0], 64, f16, out, index.astype(np.intp), g)
        assert np.array_equal(out, np.take(expected.view(wide), index, axis=1).view(np.uint16))
    with pytest.raises(ValueError):
        nat.narrow(y, y.shape[0], 64, f16, out, index[:-1].astype(np.intp), g)


def test_decode_in_threads(nat: Native) -> None:
    """The kernels run without the GIL: blocks decoded in several threads at once come out
    as decoded one by one."""
    codec = codec_for(CodecSpec("kvq", dtype="float16", head_dim=128, bits=3))
    encoded = [codec.encode(to_words(x, "float16"))
               for x in synthetic_blocks(seed=3, layers=2, heads=2, tokens=256)]
    expected = [decode_any(KVQ_ID, e) for e in encoded]
    got: dict[int, list[bytes]] = {}

    def work(i: int) -> None:
        got[i] = [decode_any(KVQ_ID, e) for e in encoded for _ in range(3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert got[i] == [e for e in expected for _ in range(3)]
