"""kvq's channel orders: grouped and arbitrary orders round-trip, a corrupt order is an
integrity error (on the compiled loops and on the numpy path)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from s3kv.errors import IntegrityError
from s3kv.store.codecs import (
    KVQ_ID,
    CodecSpec,
    codec_for,
    decode_any,
)
from s3kv.store.codecs.kvq import bound
from s3kv.store.codecs.synth import synthetic_blocks, to_words
from tests.codecs.kvq_cases import DTYPES, encoded_blocks, rel_mse_and_cos

pytestmark = pytest.mark.usefixtures("kvq_path")


def _with_checksums(head: bytes, payload: bytes) -> bytes:
    """A kvq block from a header and payload, both CRCs recomputed."""
    h = bytearray(head[:48])
    h[32:40] = len(payload).to_bytes(8, "little")
    h[40:44] = zlib.crc32(payload).to_bytes(4, "little")
    h[44:48] = zlib.crc32(bytes(h[:44])).to_bytes(4, "little")
    return bytes(h) + payload


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bits", [2.5, 3.5])
@pytest.mark.parametrize("groups", [(4,), (2,), ()])
def test_kvq_channel_orders_round_trip(dtype: str, bits: float, groups: tuple[int, ...],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoder undoes a channel order that keeps aligned groups of 4 (or 2) channels with
    64- (32-) bit word gathers and any other order with 16-bit ones: every order decodes
    within the bound, and the wide gathers give exactly what the 16-bit one gives."""
    from s3kv.store.codecs import kvq, kvq_decode

    monkeypatch.setattr(kvq, "GROUPS", groups)
    monkeypatch.setattr(kvq, "GROUP_TOLERANCE", 1e9)  # always take the grouped order
    x = synthetic_blocks(seed=6, layers=1, heads=2, tokens=300)[0]  # 600 vectors
    raw = to_words(x, dtype)
    enc = codec_for(CodecSpec("kvq", dtype=dtype, head_dim=128, bits=bits)).encode(raw)
    assert enc[10] & 1  # permuted
    g, _ = kvq_decode._unpermutation(enc[48:48 + 128], 128)
    assert g == (groups[0] if groups else 1)
    dec = decode_any(KVQ_ID, enc)
    rel, _ = rel_mse_and_cos(raw, dec, dtype, 128)
    assert rel <= bound(bits)
    kvq_decode._unpermutation.cache_clear()
    monkeypatch.setattr(kvq_decode, "_WIDEST", 1)  # 16-bit gathers only
    assert decode_any(KVQ_ID, enc) == dec
    kvq_decode._unpermutation.cache_clear()


def test_kvq_arbitrary_channel_order_decodes() -> None:
    """The un-permutation the decoder derives from a stored channel order puts stored
    channel i at channel perm[i] for any permutation: arbitrary, or keeping aligned groups of
    4 or 2 (the format does not say which kind the encoder chose)."""
    from s3kv.store.codecs import kvq_decode

    d = 128
    rng = np.random.default_rng(11)
    for perm in (rng.permutation(d), np.arange(d).reshape(-1, 4)[rng.permutation(d // 4)]
                 .reshape(-1), np.arange(d).reshape(-1, 2)[rng.permutation(d // 2)].reshape(-1)):
        g, index = kvq_decode._unpermutation(perm.astype(np.uint8).tobytes(), d)
        words = rng.integers(0, 1 << 16, (5, d), dtype=np.uint16)  # stored order
        wide = kvq_decode._WORD_TYPES[g]
        out = np.take(words.view(wide), index, axis=1)
        expected = np.empty_like(words)
        expected[:, perm] = words  # stored channel i is channel perm[i]
        assert np.array_equal(out.view(np.uint16), expected)


@pytest.mark.parametrize("how", ["duplicate", "out of range", "duplicate group"])
def test_kvq_corrupt_channel_order_is_an_integrity_error(how: str) -> None:
    """A channel order that is not a permutation is caught even when the checksums match."""
    from s3kv.store.codecs import kvq_decode

    kvq_decode._unpermutation.cache_clear()
    _, enc = encoded_blocks()[2]  # 2.5 bits: permuted
    assert enc[10] & 1
    payload = bytearray(enc[48:])
    if how == "duplicate":
        payload[1] = payload[0]
    elif how == "out of range":
        payload[5] = 200
    else:  # aligned groups of 4, in order, but one of them twice
        payload[4:8] = payload[0:4]
    with pytest.raises(IntegrityError):
        decode_any(KVQ_ID, _with_checksums(enc[:48], bytes(payload)))
