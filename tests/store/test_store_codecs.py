"""Codecs through the store: per-namespace choice, lossless round trips, lossy only on request,
corrupt encoded blocks are misses."""

from __future__ import annotations

import numpy as np
import pytest

from s3kv.backends.base import Backend
from s3kv.errors import InvalidInput
from s3kv.store.codecs import KVQ_ID, ZSTD_ID, parse_codec_spec
from tests.store.helpers import open_store


def kv_tensor(n_vectors: int, head_dim: int = 128) -> bytes:
    rng = np.random.default_rng(7)
    scales = rng.lognormal(0, 0.5, head_dim).astype(np.float32)
    x = rng.standard_normal((n_vectors, head_dim)).astype(np.float32) * scales
    return x.astype(np.float16).tobytes()


async def test_zstd_namespace_round_trips_exactly(backend: Backend) -> None:
    store = await open_store(backend)
    try:
        await store.create_namespace("packed", "zstd:level=3,shuffle=1")
        data = kv_tensor(1024)
        await store.put("packed", b"k", data)
        await store.flush()
        loc = store.index.get(store.ns_id("packed"), b"k")
        assert loc is not None and loc.codec == ZSTD_ID and loc.length < len(data)
        assert await store.get("packed", b"k") == data
        assert store.head("packed", b"k").size == len(data)  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_kvq_only_where_asked(backend: Backend) -> None:
    store = await open_store(backend)
    try:
        await store.create_namespace("lossy", "kvq:bits=4,dtype=float16,head_dim=128")
        await store.create_namespace("exact")
        data = kv_tensor(512)
        await store.put("lossy", b"k", data)
        await store.put("exact", b"k", data)
        await store.flush()
        assert await store.get("exact", b"k") == data
        loc = store.index.get(store.ns_id("lossy"), b"k")
        assert loc is not None and loc.codec == KVQ_ID and loc.length * 3 < len(data)
        got = await store.get("lossy", b"k")
        assert got is not None and len(got) == len(data) and got != data
        a = np.frombuffer(data, np.float16).astype(np.float32).reshape(-1, 128)
        b = np.frombuffer(got, np.float16).astype(np.float32).reshape(-1, 128)
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        assert cos.mean() > 0.99
        with pytest.raises(InvalidInput):  # not a whole number of 128-wide fp16 vectors
            await store.put("lossy", b"bad", b"\x00" * 1000)
        with pytest.raises(InvalidInput):  # a lossy codec is never forced on an exact namespace
            from s3kv.store.codecs import codec_from_headers

            codec_from_headers({"x-s3kv-codec": "kvq"}, store.namespace_codecs["exact"])
    finally:
        await store.close()


async def test_namespace_codec_survives_restart(backend: Backend) -> None:
    store = await open_store(backend)
    try:
        await store.create_namespace("packed", "zstd:level=5")
        await store.put("packed", b"k", b"abc" * 1000)
        await store.flush()
    finally:
        await store.close()
    again = await open_store(backend)
    try:
        assert again.namespace_codecs["packed"] == parse_codec_spec("zstd:level=5")
        assert await again.get("packed", b"k") == b"abc" * 1000
    finally:
        await again.close()


async def test_corrupt_encoded_block_is_a_miss(backend: Backend) -> None:
    store = await open_store(backend)
    try:
        await store.create_namespace("packed", "zstd")
        data = kv_tensor(256)
        await store.put("packed", b"k", data)
        await store.flush()
        nid = store.ns_id("packed")
        loc = store.index.get(nid, b"k")
        assert loc is not None
        seg = store.segments.get(loc.segment)
        assert seg is not None
        key = f"segments/{seg.name}.seg"
        raw = bytearray(await backend.get_object(key))
        raw[loc.offset + loc.length // 2] ^= 0x55
        await backend.put_object(key, bytes(raw))
        assert await store.get("packed", b"k") is None
        assert store.stats.checksum_failures == 1
    finally:
        await store.close()
