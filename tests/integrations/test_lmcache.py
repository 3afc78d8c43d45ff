"""The LMCache plugin with the real LMCache 0.5.6 on CPU, through LMCache's ``RemoteBackend``.

The gateway is a real ``s3kv serve`` process on a file store (on moto, for direct reads);
LMCache's RemoteBackend is created with ``plugin_name="s3kv"`` and loads the plugin through its
remote storage plugin framework, as an engine configured per docs/lmcache.md does. Nothing is
mocked.

LMCache is not part of the main test environment: there this module is skipped, and ``.ci/run``
runs it (``-m lmcache``) in its own environment with S3KV_REQUIRE_LMCACHE=1, where a missing
LMCache is an import error, not a skip.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("S3KV_REQUIRE_LMCACHE"):
    import lmcache  # noqa: F401  (the LMCache CI run: no LMCache is a failure)
else:
    pytest.importorskip("lmcache")

from tests.conftest import make_s3_client
from tests.gateway.test_gateway_ops import scrape, value
from tests.integrations.engine import LLAMA3_8B, same_bytes
from tests.support.gateway import TOKEN, Gateway
from tests.support.s3server import MotoServer

pytestmark = pytest.mark.lmcache
MiB = 1024 * 1024
#: --max-request-memory 128MiB: the gateway takes batch-put bodies up to 64 MiB, so a batch of
#: 32 MiB chunks has to be sent as several requests
BIG = ["--segment-size", "96MiB", "--part-size", "16MiB", "--max-block-size", "48MiB",
       "--max-request-memory", "128MiB", "--seal-after", "0.5", "--sync-interval", "0"]


def _start(store: str, args: list[str]) -> Gateway:
    gw = Gateway(store, args)  # at debug: every request's status, for a failing store's message
    gw.start()
    return gw


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = _start(f"file://{tmp_path_factory.mktemp('store')}", BIG)
    try:
        yield gw
    finally:
        gw.cleanup()


def _flush(gw: Gateway) -> None:
    req = urllib.request.Request(gw.endpoint + "/v1/flush", method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200


def _requests(gw: Gateway) -> float:
    """Every HTTP request the gateway counted, scrapes of /metrics left out."""
    samples = scrape(gw)
    return sum(v for lab, v in samples.get("s3kv_requests_total", [])
               if lab.get("op") != "Metrics")


def test_small_chunks_round_trip_whole(gateway: Gateway, engine_for: Any) -> None:
    e = engine_for(gateway)
    keys = [e.key(i) for i in range(4)] + [e.key(99)]
    objs = [e.chunk() for _ in range(4)] + [e.chunk(tokens=5)]  # the last: a partial chunk
    e.store(keys, objs)
    assert all(e.backend.contains(k) for k in keys)
    assert e.backend.batched_contains(keys) == len(keys)
    got = e.backend.batched_get_blocking(keys)
    assert all(g is not None and same_bytes(g, o) for g, o in zip(got, objs, strict=True))
    assert got[-1].get_shapes() == objs[-1].get_shapes()  # the partial chunk keeps its shape
    one = e.backend.get_blocking(keys[1])
    assert one is not None and same_bytes(one, objs[1])
    assert e.backend.get_blocking(e.key(12345)) is None
    assert not e.backend.contains(e.key(12345))
    # LMCache's remove goes through the plugin's remove_sync
    assert e.backend.remove(keys[0])
    assert not e.backend.contains(keys[0])
    assert keys[1].to_string() in asyncio.run_coroutine_threadsafe(
        e.connector.list(), e.loop).result(10)
    assert asyncio.run_coroutine_threadsafe(e.connector.ping(), e.loop).result(10) == 0


def test_several_gateways_each_key_at_its_home(tmp_path: Path, engine_for: Any) -> None:
    """s3kv_url with two gateways (separate stores, so a key is found only at its home)."""
    gws = [_start(f"file://{tmp_path / str(i)}", BIG) for i in range(2)]
    try:
        e2 = engine_for(gws[0], s3kv_url=f"{gws[0].endpoint},{gws[1].endpoint}")
        keys = [e2.key(i) for i in range(24)]
        objs = [e2.chunk() for _ in keys]
        e2.store(keys, objs)
        assert e2.backend.batched_contains(keys) == 24
        got = e2.backend.batched_get_blocking(keys)
        assert all(g is not None and same_bytes(g, o) for g, o in zip(got, objs, strict=True))
        held = [value(scrape(g), "s3kv_index_entries") for g in gws]
        assert sum(held) == 24 and min(held) > 0  # split between the two, no copies
    finally:
        for g in gws:
            g.cleanup()


def test_32mib_chunks_round_trip_whole(gateway: Gateway, engine_for: Any) -> None:
    e = engine_for(gateway, kv_shape=LLAMA3_8B, cpu_gib=0.5)
    objs = [e.chunk() for _ in range(3)]  # one batch of 96 MiB: three requests
    assert len(memoryview(objs[0].byte_array).cast("B")) == 32 * MiB  # Llama-3-8B, 256 tokens
    keys = [e.key(i) for i in range(3)]
    e.store(keys, objs)
    assert e.backend.batched_contains(keys) == 3
    got = e.backend.batched_get_blocking(keys)
    assert all(g is not None and same_bytes(g, o) for g, o in zip(got, objs, strict=True))
    for g in got:
        g.ref_count_down()


def test_prefix_of_64_with_a_gap_is_one_request(gateway: Gateway, engine_for: Any) -> None:
    e = engine_for(gateway)
    keys = [e.key(i) for i in range(64)]
    present = [i for i in range(64) if i != 40]
    e.store([keys[i] for i in present], [e.chunk() for _ in present])
    before = _requests(gateway)
    assert e.backend.batched_contains(keys) == 40
    assert _requests(gateway) - before == 1
    # the asynchronous variant the scheduler uses, and the prefix rule of non-blocking gets
    assert asyncio.run_coroutine_threadsafe(
        e.backend.batched_async_contains("l1", keys), e.loop).result(10) == 40
    got = asyncio.run_coroutine_threadsafe(
        e.backend.batched_get_non_blocking("l1", keys), e.loop).result(30)
    assert len(got) == 40
    for g in got:
        g.ref_count_down()


def test_evicted_chunk_is_gone_for_lmcache(tmp_path: Path, engine_for: Any) -> None:
    gw = _start(f"file://{tmp_path}", ["--segment-size", "8MiB", "--part-size", "1MiB",
                                        "--max-block-size", "4MiB", "--capacity", "16MiB",
                                        "--seal-after", "0.5", "--sync-interval", "0"])
    try:
        e = engine_for(gw, kv_shape=(4, 2, 64, 4, 128))  # 512 KiB chunks
        victim = e.key(1)
        e.store([victim], [e.chunk()])
        _flush(gw)
        assert e.backend.contains(victim)
        deadline = time.monotonic() + 60
        batch = 0
        while value(scrape(gw), "s3kv_evictions_total") == 0 or e.backend.contains(victim):
            assert time.monotonic() < deadline, "the gateway never evicted the first segment"
            objs = [e.chunk() for _ in range(16)]  # 8 MiB more, sealed
            e.store([e.key(5000 + batch * 16 + j) for j in range(16)], objs)
            for o in objs:
                o.ref_count_down()
            _flush(gw)
            batch += 1
        assert not e.backend.contains(victim)
        assert e.backend.get_blocking(victim) is None
        assert e.backend.batched_contains([victim]) == 0
    finally:
        gw.cleanup()


def test_gateway_down_misses_in_bounded_time(tmp_path: Path, engine_for: Any) -> None:
    gw = _start(f"file://{tmp_path}", BIG)
    try:
        e = engine_for(gw, s3kv_lookup_timeout=1.0, s3kv_put_within=1.0)
        keys = [e.key(i) for i in range(8)]
        e.store(keys[:4], [e.chunk() for _ in range(4)])
        assert e.backend.batched_contains(keys) == 4
        # a gateway that hangs (stopped, its socket still accepting): misses within the lookup
        # timeout, not LMCache's 10 s blocking timeout
        os.kill(gw.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            assert e.backend.batched_contains(keys) == 0
            assert time.monotonic() - start < 3.0
        finally:
            os.kill(gw.pid, signal.SIGCONT)
        gw.kill()  # and one that is gone
        start = time.monotonic()
        assert e.backend.batched_contains(keys) == 0
        assert not e.backend.contains(keys[0])
        assert e.backend.get_blocking(keys[0]) is None
        assert e.backend.batched_get_blocking(keys[:2]) == [None, None]
        assert time.monotonic() - start < 3.0
        assert asyncio.run_coroutine_threadsafe(e.connector.ping(), e.loop).result(10) == 1
        dropped = e.connector.dropped_puts
        e.store(keys[4:], [e.chunk() for _ in range(4)], timeout=10,
                may_drop=True)  # nothing raises
        assert e.connector.dropped_puts == dropped + 4
        assert e.backend.put_failed_count == 0  # LMCache saw no failure, the plugin dropped
    finally:
        gw.cleanup()


def test_gateway_hung_before_the_first_call_misses_within_the_lookup_timeout(
        tmp_path: Path, engine_for: Any) -> None:
    """LMCache's ``contains`` waits on the plugin's ``exists`` with no timeout of its own: a
    gateway that hangs before the engine's first call must cost it a lookup timeout, not the
    batch timeout of creating the namespace (reads do not wait for one; a write creates it)."""
    gw = _start(f"file://{tmp_path}", BIG)
    try:
        e = engine_for(gw, s3kv_lookup_timeout=1.0)
        keys = [e.key(i) for i in range(2)]
        os.kill(gw.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            assert not e.backend.contains(keys[0])
            assert e.backend.batched_contains(keys) == 0
            assert asyncio.run_coroutine_threadsafe(
                e.backend.batched_async_contains("h", keys), e.loop).result(30) == 0
            assert time.monotonic() - start < 5.0
        finally:
            os.kill(gw.pid, signal.SIGCONT)
        objs = [e.chunk() for _ in keys]
        e.store(keys, objs)  # the first write creates the namespace
        assert e.backend.batched_contains(keys) == 2
    finally:
        gw.cleanup()


def test_corrupted_block_is_a_miss(tmp_path: Path, engine_for: Any) -> None:
    gw = _start(f"file://{tmp_path}", BIG)
    try:
        e = engine_for(gw)
        keys = [e.key(i) for i in range(3)]
        objs = [e.chunk() for _ in range(3)]
        e.store(keys, objs)
        _flush(gw)
        marker = bytes(memoryview(objs[1].byte_array).cast("B")[:4096])
        flipped = 0
        for path in tmp_path.rglob("*"):
            if path.is_file():
                data = bytearray(path.read_bytes())
                at = data.find(marker)
                if at >= 0:
                    data[at + 100] ^= 0xFF
                    path.write_bytes(bytes(data))
                    flipped += 1
        assert flipped == 1
        before = value(scrape(gw), "s3kv_checksum_failures_total")
        got = e.backend.batched_get_blocking(keys)
        assert got[1] is None
        assert got[0] is not None and same_bytes(got[0], objs[0])
        assert got[2] is not None and same_bytes(got[2], objs[2])
        assert value(scrape(gw), "s3kv_checksum_failures_total") == before + 1
        prefix = asyncio.run_coroutine_threadsafe(
            e.backend.batched_get_non_blocking("c", keys), e.loop).result(30)
        assert len(prefix) == 1 and same_bytes(prefix[0], objs[0])
    finally:
        gw.cleanup()


def test_direct_reads_fill_lmcache_buffers_and_a_corrupt_chunk_is_a_miss(
        s3_server: MotoServer, engine_for: Any) -> None:
    """A gateway on S3 (moto) with ``--direct-reads``: LMCache's chunks, 32 MiB and small, are
    read by the plugin from the S3 server itself into LMCache's buffers (the gateway reads none
    of them), whole; a chunk corrupted in its segment object is a miss, its neighbours arrive."""
    bucket = f"lmc-{uuid.uuid4().hex[:10]}"
    s3 = make_s3_client(s3_server.endpoint)
    s3.create_bucket(Bucket=bucket)
    gw = _start(f"s3://{bucket}/kv?endpoint={s3_server.endpoint}", [*BIG, "--direct-reads", "60"])
    try:
        e = engine_for(gw, kv_shape=LLAMA3_8B, cpu_gib=0.5)
        keys = [e.key(i) for i in range(3)]
        objs = [e.chunk() for _ in keys]
        e.store(keys, objs)
        small = engine_for(gw)
        small_keys = [small.key(i) for i in range(5)]
        small_objs = [small.chunk() for _ in range(4)] + [small.chunk(tokens=5)]
        small.store(small_keys, small_objs)
        _flush(gw)
        before = scrape(gw)
        got = e.backend.batched_get_blocking(keys)
        assert all(g is not None and same_bytes(g, o) for g, o in zip(got, objs, strict=True))
        for g in got:
            g.ref_count_down()
        got = small.backend.batched_get_blocking(small_keys)
        assert all(g is not None and same_bytes(g, o)
                   for g, o in zip(got, small_objs, strict=True))
        assert got[-1].get_shapes() == small_objs[-1].get_shapes()
        after = scrape(gw)
        assert (value(after, "s3kv_direct_located_total")
                - value(before, "s3kv_direct_located_total")) == 8
        assert (value(after, "s3kv_backend_reads_total")
                == value(before, "s3kv_backend_reads_total"))

        # one byte of the middle 32 MiB chunk flipped in its segment object (the small chunks
        # come from the same random stream as the first big one: not those)
        marker = bytes(memoryview(objs[1].byte_array).cast("B")[:4096])
        listed = s3.list_objects_v2(Bucket=bucket, Prefix="kv/segments/")["Contents"]
        flipped = 0
        for obj in listed:
            data = bytearray(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
            at = data.find(marker)
            if at >= 0:
                data[at + 100] ^= 0xFF
                s3.put_object(Bucket=bucket, Key=obj["Key"], Body=bytes(data))
                flipped += 1
        assert flipped == 1
        got = e.backend.batched_get_blocking(keys)
        assert got[1] is None
        assert all(g is not None and same_bytes(g, o) for i, (g, o) in
                   enumerate(zip(got, objs, strict=True)) if i != 1)
        for g in got:
            if g is not None:
                g.ref_count_down()
    finally:
        gw.cleanup()


def test_plugin_options_from_extra_config_and_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``s3kv_direct_reads`` (and the rest) from LMCache's extra_config, else S3KV_*; a value
    that is not a boolean, an option that does not exist, half a credential or a timeout that
    is not positive is a ConfigError naming the option, not a silent default."""
    from types import SimpleNamespace

    from s3kv.errors import ConfigError
    from s3kv.integrations.lmcache import PluginSettings

    base = {"s3kv_url": "http://gw:9470", "s3kv_namespace": "kv-ns"}
    assert PluginSettings.from_config(SimpleNamespace(extra_config=base)).direct_reads
    off = PluginSettings.from_config(SimpleNamespace(
        extra_config={**base, "s3kv_direct_reads": "false", "s3kv_connections": "4"}))
    assert not off.direct_reads and off.connections == 4
    monkeypatch.setenv("S3KV_DIRECT_READS", "0")
    assert not PluginSettings.from_config(SimpleNamespace(extra_config=base)).direct_reads
    with pytest.raises(ConfigError, match="s3kv plugin option"):
        PluginSettings.from_config(SimpleNamespace(
            extra_config={**base, "s3kv_direct_reads": "maybe"}))
    # a misspelt option, half a credential or a timeout of 0 is an error, not a default
    for wrong, match in (({"s3kv_namspace": "x"}, "s3kv_namspace is not an s3kv plugin"),
                         ({"s3kv_access_key": "ak"}, "give both s3kv_access_key"),
                         ({"s3kv_timeout": "0"}, "must be positive"),
                         ({"s3kv_connections": "0"}, "must be positive"),
                         ({"s3kv_put_within": "-1"}, "not negative")):
        with pytest.raises(ConfigError, match=match):
            PluginSettings.from_config(SimpleNamespace(extra_config={**base, **wrong}))
    # LMCache's own keys for the plugin are not the plugin's options
    assert PluginSettings.from_config(SimpleNamespace(extra_config={
        **base, "remote_storage_plugin.s3kv.module_path": "s3kv.integrations.lmcache"}))
    # every S3KV_* variable the plugin reads is one `s3kv serve` knows (no unknown_env warning)
    from s3kv.config import Settings
    from s3kv.integrations.lmcache import plugin_variables
    assert Settings.unknown_env({name: "1" for name in plugin_variables()}) == []
