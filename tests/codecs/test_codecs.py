"""Codecs: zstd is lossless, kvq stays within its documented error, corrupt blocks never decode."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from s3kv.cli import main
from s3kv.errors import IntegrityError, InvalidInput
from s3kv.store.codecs import (
    KVQ_ID,
    NONE_ID,
    ZSTD_ID,
    CodecSpec,
    codec_for,
    codec_from_headers,
    decode_any,
    parse_codec_spec,
)
from s3kv.store.codecs.kvq import bound
from s3kv.store.codecs.synth import from_words, synthetic_blocks, to_words
from tests.codecs.kvq_cases import BITS, DTYPES, encoded_blocks, rel_mse_and_cos

#: every test here runs on kvq's compiled loops and on its numpy path
pytestmark = pytest.mark.usefixtures("kvq_path")


def _blob(n: int, seed: int = 1) -> bytes:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n // 2 + 1).astype(np.float16).tobytes() * 1)[:n]


# -- none and zstd ------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 2, 3, 4095, 65537, 300_001])
@pytest.mark.parametrize("shuffle", [False, True])
def test_zstd_round_trips_byte_for_byte(n: int, shuffle: bool) -> None:
    data = _blob(n)
    codec = codec_for(CodecSpec("zstd", level=3, shuffle=shuffle))
    enc = codec.encode(data)
    assert codec.codec_id == ZSTD_ID
    assert decode_any(ZSTD_ID, enc) == data
    assert codec.decode(memoryview(enc)) == data


def test_zstd_shuffle_pays_on_fp16_kv() -> None:
    raw = to_words(synthetic_blocks(layers=1, heads=8, tokens=256)[0], "float16")  # > 1 zstd block
    plain = codec_for(parse_codec_spec("zstd:level=3,shuffle=0")).encode(raw)
    shuffled = codec_for(parse_codec_spec("zstd:level=3,shuffle=1")).encode(raw)
    assert len(shuffled) < len(plain) < len(raw)


def test_zstd_multithreaded_large_block() -> None:
    data = _blob(5 << 20)
    enc = codec_for(CodecSpec("zstd", level=1)).encode(data)
    assert decode_any(ZSTD_ID, enc) == data


def test_none_returns_exact_bytes() -> None:
    data = _blob(1001)
    codec = codec_for(parse_codec_spec("none"))
    assert codec.codec_id == NONE_ID
    assert decode_any(NONE_ID, codec.encode(data)) == data


# -- kvq ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bits", BITS)
def test_kvq_round_trip_within_bound(dtype: str, bits: float) -> None:
    d = 128
    rng = np.random.default_rng(7)
    sources = {
        "synthetic": synthetic_blocks(seed=3, layers=1, heads=2, tokens=256)[0],
        "isotropic": rng.standard_normal((512, d)).astype(np.float32),  # the worst case
    }
    for x in sources.values():
        raw = to_words(x, dtype)
        codec = codec_for(CodecSpec("kvq", dtype=dtype, head_dim=d, bits=bits))
        enc = codec.encode(raw)
        dec = decode_any(KVQ_ID, enc)
        assert len(dec) == len(raw)
        rel, _ = rel_mse_and_cos(raw, dec, dtype, d)
        assert rel <= bound(bits), (bits, rel, bound(bits))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bits", BITS)
def test_kvq_chunking_does_not_change_the_result(dtype: str, bits: float,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks are worked through in chunks of vectors; a ragged last chunk, and the encoder
    converting twice instead of keeping floats, give the same result up to float rounding
    (BLAS may order a dot product differently for another number of rows)."""
    from s3kv.store.codecs import kvq_math

    x = synthetic_blocks(seed=4, layers=1, heads=3, tokens=333)[0]  # 999 vectors
    raw = to_words(x, dtype)
    codec = codec_for(CodecSpec("kvq", dtype=dtype, head_dim=128, bits=bits))
    enc = codec.encode(raw)
    dec = decode_any(KVQ_ID, enc)
    monkeypatch.setattr(kvq_math, "CHUNK_ELEMS", 128 * 100)
    monkeypatch.setattr(kvq_math, "KEEP_FLOAT_ELEMS", 1000)
    enc_small = codec.encode(raw)
    a = from_words(dec, dtype).astype(np.float64)
    for other in (decode_any(KVQ_ID, enc), decode_any(KVQ_ID, enc_small)):
        b = from_words(other, dtype).astype(np.float64)
        assert np.sqrt(np.mean((a - b) ** 2) / np.mean(a * a)) < 1e-3
        rel, _ = rel_mse_and_cos(raw, other, dtype, 128)
        assert rel <= bound(bits)


@pytest.mark.parametrize("d", [64, 96, 256])
def test_kvq_other_head_dims(d: int) -> None:
    x = synthetic_blocks(seed=5, layers=1, heads=1, tokens=256, head_dim=d)[0]
    raw = to_words(x, "bfloat16")
    for bits in (2.5, 3.0):
        enc = codec_for(CodecSpec("kvq", dtype="bfloat16", head_dim=d, bits=bits)).encode(raw)
        rel, _ = rel_mse_and_cos(raw, decode_any(KVQ_ID, enc), "bfloat16", d)
        assert rel <= bound(bits)


def test_kvq_zero_and_empty_blocks() -> None:
    codec = codec_for(CodecSpec("kvq", dtype="float16", head_dim=64, bits=3))
    assert decode_any(KVQ_ID, codec.encode(b"")) == b""
    zeros = bytes(64 * 2 * 10)
    assert decode_any(KVQ_ID, codec.encode(zeros)) == zeros


def test_kvq_rejects_wrong_shape_and_values() -> None:
    codec = codec_for(CodecSpec("kvq", dtype="float16", head_dim=128, bits=3))
    with pytest.raises(InvalidInput, match="head_dim 128"):
        codec.encode(bytes(128 * 2 * 3 + 2))
    with pytest.raises(InvalidInput):
        codec.encode(bytes(255))
    with pytest.raises(InvalidInput, match="NaN"):
        codec.encode(np.full(128, np.nan, dtype=np.float16).tobytes())
    with pytest.raises(InvalidInput, match="dtype"):
        CodecSpec("kvq", dtype="float32", head_dim=128)
    with pytest.raises(InvalidInput, match="dtype"):
        parse_codec_spec("kvq:dtype=int8,head_dim=128")
    with pytest.raises(InvalidInput, match="multiple of 8"):
        CodecSpec("kvq", dtype="float16", head_dim=100)
    with pytest.raises(InvalidInput, match="multiple of 32"):
        CodecSpec("kvq", dtype="float16", head_dim=80, bits=2.5)
    with pytest.raises(InvalidInput, match="bits"):
        CodecSpec("kvq", dtype="float16", head_dim=128, bits=5)
    with pytest.raises(InvalidInput, match="head_dim"):
        codec_for(CodecSpec("kvq", bits=3))  # shape not declared


@pytest.mark.parametrize(("dtype", "word", "message"), [
    ("bfloat16", 0x7FC0, "NaN"), ("bfloat16", 0x7F80, "NaN"), ("bfloat16", 0xFF80, "NaN"),
    ("bfloat16", 0x5D80, "2\\*\\*60"), ("bfloat16", 0xDD80, "2\\*\\*60"),
    ("bfloat16", 0x5D7F, None), ("float16", 0x7C00, "NaN"), ("float16", 0xFC00, "NaN"),
    ("float16", 0x7E00, "NaN"), ("float16", 0x7BFF, None), ("float16", 0xFBFF, None),
])
def test_kvq_range_checks_on_the_words(dtype: str, word: int, message: str | None) -> None:
    """NaN, infinities and bf16 magnitudes from 2**60 up are refused, anywhere in a block."""
    codec = codec_for(CodecSpec("kvq", dtype=dtype, head_dim=64, bits=3))
    words = np.zeros(64 * 3, dtype=np.uint16)
    words[70] = word
    if message is None:
        assert len(decode_any(KVQ_ID, codec.encode(words.tobytes()))) == words.nbytes
    else:
        with pytest.raises(InvalidInput, match=message):
            codec.encode(words.tobytes())


@pytest.mark.parametrize("bits", range(1, 9))
def test_kvq_bit_packing_and_level_tables(bits: int) -> None:
    """Packing matches the documented layout (code k of a group of 8 at bits [k*b, (k+1)*b)
    of its little-endian b bytes); unpack inverts it; dequantize gives levels[codes] from any
    offset, including where an overlapping word load would run past the buffer."""
    from s3kv.store.codecs import kvq_math as km

    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 1 << bits, 8 * 64).astype(np.uint8)
    packed = km.pack(codes, bits)
    ref = b"".join(
        sum(int(c) << (bits * k) for k, c in enumerate(group)).to_bytes(bits, "little")
        for group in codes.reshape(-1, 8))
    assert packed == ref
    assert np.array_equal(km.unpack(np.frombuffer(packed, np.uint8), bits, codes.size), codes)
    levels = np.sort(rng.standard_normal(1 << bits)).astype(np.float32)
    for pad in (0, 3):
        src = np.frombuffer(b"\x07" * pad + packed, dtype=np.uint8)  # packed at the very end
        got = km.dequantize(src, pad, 8, 64, bits, levels)
        assert np.array_equal(got, levels[codes].reshape(8, 64))


@pytest.mark.parametrize("dtype", DTYPES)
def test_kvq_word_conversions_are_exact(dtype: str) -> None:
    """to_f32 is exact for every finite word, and from_f32 (rounding or truncating) gives
    every word back; fp16 overflow goes to infinity like numpy's cast."""
    from s3kv.store.codecs import kvq_math as km

    words = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    words = words[(words & 0x7FFF) < (0x7C00 if dtype == "float16" else 0x7F80)]
    x = km.to_f32(words, dtype)
    assert np.array_equal(x, from_words(words.tobytes(), dtype))
    for truncate in (False, True):
        assert np.array_equal(km.from_f32(x.copy(), dtype, truncate=truncate), words)
    if dtype == "float16":
        big = np.array([65519.0, 65520.0, -70000.0, 1.0], dtype=np.float32)
        with np.errstate(over="ignore"):
            expected = big.astype(np.float16).view(np.uint16)
        assert np.array_equal(km.from_f32(big.copy(), dtype), expected)


# -- corruption: a miss, never garbage ----------------------------------------------------

@pytest.mark.parametrize("which", [0, 1, 2])
def test_corrupt_blocks_raise_integrity_error(which: int) -> None:
    codec_id, enc = encoded_blocks()[which]
    rng = np.random.default_rng(which)
    positions = sorted({*range(0, 64), *rng.integers(0, len(enc), 200).tolist(), len(enc) - 1})
    for pos in positions:
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(enc)
            bad[pos] ^= flip
            with pytest.raises(IntegrityError):
                decode_any(codec_id, bytes(bad))
    for cut in (0, 1, 10, 47, 48, len(enc) // 2, len(enc) - 1):
        with pytest.raises(IntegrityError):
            decode_any(codec_id, enc[:cut])
    with pytest.raises(IntegrityError):
        decode_any(codec_id, enc + b"\0")
    with pytest.raises(IntegrityError):
        decode_any(codec_id, bytes(len(enc)))
    with pytest.raises(IntegrityError):
        decode_any(99, enc)


def test_garbage_with_valid_checksums_is_still_rejected() -> None:
    """A header whose checksums match but whose fields lie is caught by the field checks."""
    _, enc = encoded_blocks()[1]
    head = bytearray(enc[:48])
    head[6:8] = (96).to_bytes(2, "little")  # wrong head_dim, checksum recomputed
    head[44:48] = zlib.crc32(bytes(head[:44])).to_bytes(4, "little")
    with pytest.raises(IntegrityError):
        decode_any(KVQ_ID, bytes(head) + enc[48:])


# -- specs and headers --------------------------------------------------------------------

def test_parse_codec_spec() -> None:
    assert parse_codec_spec("zstd") == CodecSpec("zstd")
    assert parse_codec_spec("zstd:level=5,shuffle=0") == CodecSpec("zstd", level=5, shuffle=False)
    spec = parse_codec_spec("kvq:bits=3.5,dtype=bf16,head_dim=128,seed=7")
    assert spec == CodecSpec("kvq", dtype="bfloat16", head_dim=128, bits=3.5, seed=7)
    assert parse_codec_spec(spec.render()) == spec
    for bad in ("lz4", "zstd:level=x", "zstd:bits=3", "kvq:bits=3,dtype", "zstd:level=99"):
        with pytest.raises(InvalidInput):
            parse_codec_spec(bad)


def test_codec_from_headers() -> None:
    ns = parse_codec_spec("kvq:bits=3")
    assert codec_from_headers({}, ns) == ns
    got = codec_from_headers({"X-S3KV-Dtype": "bf16", "x-s3kv-head-dim": "128"}, ns)
    assert got == CodecSpec("kvq", dtype="bfloat16", head_dim=128, bits=3)
    assert codec_from_headers({"x-s3kv-codec": "zstd:level=1"}, ns) == CodecSpec("zstd", level=1)
    assert codec_from_headers({"x-s3kv-codec": "none"}, None) == CodecSpec("none")
    # shape headers are harmless on lossless namespaces
    assert codec_from_headers({"x-s3kv-dtype": "bf16"}, CodecSpec("zstd")) == CodecSpec("zstd")
    # a lossy codec only where the namespace asked for it
    with pytest.raises(InvalidInput, match="lossy"):
        codec_from_headers({"x-s3kv-codec": "kvq:bits=3,dtype=bf16,head_dim=128"}, None)
    with pytest.raises(InvalidInput, match="lossy"):
        codec_from_headers({"x-s3kv-codec": "kvq"}, CodecSpec("zstd"))
    with pytest.raises(InvalidInput):
        codec_from_headers({"x-s3kv-head-dim": "abc"}, ns)


# -- codec-bench --------------------------------------------------------------------------

REFERENCE = "effective_bits,compression_ratio,cosine_similarity\n" \
            "16,1.0,1.000\n2.5,5.3,0.964\n3,4.9,0.983\n3.5,4.0,0.990\n4,3.8,0.995\n"


def test_codec_bench_json_meets_reference(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The quality targets of the issue (throughput is not asserted: CI machines are noisy)."""
    ref = tmp_path / "ref.csv"
    ref.write_text(REFERENCE)
    x = synthetic_blocks(seed=9, layers=1, heads=1, tokens=1024)[0]  # a 256 KiB block
    np.save(tmp_path / "real.npy", x)
    code = main(["codec-bench", "--json", "--reference", str(ref), "--layers", "2",
                 "--heads", "4", "--tokens", "512", "--repeat", "1", "--check",
                 str(tmp_path / "real.npy")])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0
    kvq = [r for r in rows if r["source"] == "synthetic" and r["effective_bits"]]
    assert {r["effective_bits"] for r in kvq} == set(BITS)
    for r in kvq:
        if r["effective_bits"] == 2.0:
            assert r["ref_ratio"] is None
            continue
        assert r["ratio"] >= r["ref_ratio"] and r["cosine_mean"] >= r["ref_cosine"], r
        assert r["meets_reference"] is True
    lossless = [r for r in rows if r["codec"].startswith(("none", "zstd"))]
    assert lossless and all(r["rel_mse"] == 0 and r["cosine_mean"] == 1 for r in lossless)
    assert any(r["source"] == "real" for r in rows)
