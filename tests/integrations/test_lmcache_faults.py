"""The LMCache plugin under faults around the gateway, driven through LMCache's ``RemoteBackend``
(real LMCache 0.5.6 on CPU, a real ``s3kv serve``), as test_lmcache.py: what each fault costs the
engine's threads, and that nothing wrong comes back. Skipped where LMCache is not installed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

if os.environ.get("S3KV_REQUIRE_LMCACHE"):
    import lmcache  # noqa: F401  (the LMCache CI run: no LMCache is a failure)
else:
    pytest.importorskip("lmcache")

from lmcache.v1.protocol import RemoteMetadata

from s3kv.client import S3KVClient
from tests.integrations.engine import same_bytes
from tests.support.gateway import TOKEN, Gateway

pytestmark = pytest.mark.lmcache
ARGS = ["--seal-after", "0.5", "--sync-interval", "0"]
#: seconds the DNS server of the test does not answer
SILENT = 10.0


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(f"file://{tmp_path}", ARGS)
    gw.start()
    try:
        yield gw
    finally:
        gw.cleanup()


def test_a_dns_server_that_does_not_answer_costs_a_lookup_seconds(
        gateway: Gateway, engine_for: Any) -> None:
    """s3kv_url naming a host (a headless Service's name) is resolved by the plugin before its
    requests. A DNS server that does not answer cannot run here: LMCache's event loop's
    ``getaddrinfo`` is replaced by one that waits 10 s first (the only thing mocked). LMCache's
    ``contains`` waits on the plugin with no timeout of its own, so the resolution must be
    bounded: a miss within seconds, and hits again once DNS answers."""
    e = engine_for(gateway, url=f"http://localhost:{gateway.port}", s3kv_lookup_timeout=1.0)
    keys = [e.key(i) for i in range(2)]
    real = e.loop.getaddrinfo
    answers = asyncio.Event()  # set (on LMCache's loop): the DNS server answers again

    async def silent_dns(*args: Any, **kw: Any) -> Any:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(answers.wait(), SILENT)
        return await real(*args, **kw)

    e.loop.getaddrinfo = silent_dns
    try:
        start = time.monotonic()
        assert not e.backend.contains(keys[0])
        assert time.monotonic() - start < 6.0
    finally:
        e.loop.getaddrinfo = real
        e.loop.call_soon_threadsafe(answers.set)  # and the queries it was sitting on
    e.store(keys, [e.chunk() for _ in keys])
    assert e.backend.contains(keys[0])
    assert e.backend.batched_contains(keys) == 2


def test_a_block_whose_header_lmcache_cannot_read_is_a_miss_alone(
        gateway: Gateway, engine_for: Any) -> None:
    """A block in the namespace whose metadata header LMCache cannot read (here a dtype code
    it does not know: another writer, another LMCache version) is a miss; the blocks of the
    same batch get around it arrive."""
    e = engine_for(gateway)
    keys = [e.key(i) for i in range(3)]
    objs = [e.chunk() for _ in keys]
    e.store(keys, objs)
    payload = bytes(memoryview(objs[1].byte_array).cast("B"))
    head = bytearray(RemoteMetadata(len(payload), objs[1].get_shapes(), objs[1].get_dtypes(),
                                    objs[1].get_memory_format()).serialize())
    struct.pack_into("i", head, 8, 99)  # (length, format, dtype, shape...): dtype 99

    async def overwrite() -> None:
        async with S3KVClient(gateway.endpoint, token=TOKEN) as kv:
            await kv.put_many(e.connector.namespace, {keys[1].to_string(): bytes(head) + payload})

    asyncio.run(overwrite())
    got = e.backend.batched_get_blocking(keys)
    assert got[1] is None
    for i in (0, 2):
        assert got[i] is not None and same_bytes(got[i], objs[i])
        got[i].ref_count_down()
    assert e.backend.get_blocking(keys[1]) is None


@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_a_timeout_of_yaml_infinity_or_nan_is_a_config_error(tmp_path: Path, value: str) -> None:
    """LMCache's YAML loader reads ``.inf`` and ``.nan`` as floats. A lookup timeout of
    ``.inf`` (meant as "no limit") made every lookup of stored chunks a miss (the blocking
    ones raised OverflowError inside LMCache's wait); ``.nan`` passed the positivity check.
    Each seconds option that is not a finite number is a ConfigError naming it."""
    from lmcache.v1.config import LMCacheEngineConfig

    from s3kv.errors import ConfigError
    from s3kv.integrations.lmcache import PluginSettings

    for option in ("s3kv_lookup_timeout", "s3kv_timeout", "s3kv_put_within", "s3kv_down_for"):
        path = tmp_path / "lmcache.yaml"
        path.write_text("chunk_size: 256\nremote_serde: naive\nremote_storage_plugins: [s3kv]\n"
                        "extra_config:\n  s3kv_url: http://gw:9470\n  s3kv_namespace: kv-ns\n"
                        f"  {option}: {value}\n")
        config = LMCacheEngineConfig.from_file(str(path))
        assert isinstance(config.extra_config[option], float)
        with pytest.raises(ConfigError, match=f"{option} must be a finite number"):
            PluginSettings.from_config(config)


def test_a_namespace_the_gateway_cannot_create_stops_the_plugin_loading(
        gateway: Gateway, engine_for: Any) -> None:
    """``s3kv_namespace: Llama_3_8B`` (a model's name as it is written) is no bucket name the
    gateway takes: the plugin loaded, dropped every put and missed every lookup, with a warning
    every 5 s. Now it does not load (LMCache logs the ConfigError, which names the option)."""
    from s3kv.errors import ConfigError
    from s3kv.integrations.lmcache import PluginSettings

    e = engine_for(gateway, s3kv_namespace="Llama_3_8B")
    assert e.backend.connection is None
    with pytest.raises(ConfigError, match="s3kv_namespace: invalid namespace"):
        PluginSettings.from_config(e.config)


class SlowLink:
    """A TCP relay to the gateway that carries what the engine sends at ``rate`` bytes a second
    per connection (answers at full speed): a slow network, run on a thread of its own."""

    def __init__(self, port: int, rate: float) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = asyncio.run_coroutine_threadsafe(asyncio.start_server(
            self._relay, "127.0.0.1", 0), self.loop).result(10)
        self.port = self.server.sockets[0].getsockname()[1]
        self._to, self._rate = port, rate

    async def _relay(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", self._to)

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, rate: float) -> None:
            with contextlib.suppress(OSError):
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
                    await asyncio.sleep(len(data) / rate)
            w.close()

        await asyncio.gather(pipe(cr, uw, self._rate), pipe(ur, cw, float("inf")))

    def close(self) -> None:
        async def shut() -> None:  # the relays still running end with it
            self.server.close()
            relays = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in relays:
                t.cancel()
            await asyncio.gather(*relays, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def test_lookups_find_a_connection_while_puts_crawl(gateway: Gateway, engine_for: Any) -> None:
    """Two stores of 8 MiB on a slow link (2 MB/s) with s3kv_connections: 2 took both of the
    gateway's connections; a lookup then waited the connect timeout (2 s) for one, failed, and
    marked the healthy gateway down (with several gateways, its keys went elsewhere for
    s3kv_down_for seconds). Batch puts now leave LOOKUP_RESERVE (2) connections to the rest (at
    least one with 2): the lookup finds one and hits."""
    link = SlowLink(gateway.port, 2e6)
    try:
        e = engine_for(gateway, url=f"http://127.0.0.1:{link.port}", s3kv_connections=2,
                       kv_shape=(8, 2, 64, 4, 128))  # 1 MiB chunks
        e.store([e.key(0)], [e.chunk()])
        done = threading.Semaphore(0)
        for batch in (1, 2):
            e.backend.batched_submit_put_task(
                [e.key(batch * 100 + i) for i in range(8)], [e.chunk() for _ in range(8)],
                on_complete_callback=lambda _k: done.release())
        time.sleep(0.5)  # both batch puts are on their way
        start = time.monotonic()
        assert e.backend.contains(e.key(0))
        assert time.monotonic() - start < 1.5
        for _ in range(16):
            assert done.acquire(timeout=60)
        assert e.connector.dropped_puts == 0
        assert e.backend.batched_contains([e.key(200 + i) for i in range(8)]) == 8
    finally:
        link.close()


class _CuttingProxy:
    """A loopback HTTP proxy to the gateway, in its own thread: requests pass whole, except
    that a batch get's answer is cut after ``keep`` of its bytes (the connection closed, as a
    gateway that dies mid-stream)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.keep: float = 1.0  # share of a batch get's answer let through
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.port = 0

    def __enter__(self) -> _CuttingProxy:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        asyncio.run_coroutine_threadsafe(self.session.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _start(self) -> None:
        self.session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with self.session.request(request.method, self.upstream + request.path_qs,
                                        headers=headers, data=await request.read()) as up:
            body = await up.read()
            if not request.path.endswith("/batch-get"):
                return web.Response(status=up.status, body=body, headers={
                    k: v for k, v in up.headers.items()
                    if k.lower() not in ("content-length", "transfer-encoding")})
        resp = web.StreamResponse(status=up.status,
                                  headers={"Content-Type": up.headers["Content-Type"]})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(body[:int(len(body) * self.keep)])
        await asyncio.sleep(0.1)
        assert request.transport is not None
        request.transport.close()
        return resp


def test_chunks_read_whole_before_a_stream_breaks_are_kept(gateway: Gateway,
                                                           engine_for: Any) -> None:
    """A gateway lost in the middle of a batch get (here a proxy closes the connection 60% into
    its answer of four chunks): the two chunks that arrived whole and checked are hits, the
    rest misses; before, the error dropped them all and LMCache recomputed the whole prefix."""
    with _CuttingProxy(gateway.endpoint) as proxy:
        e = engine_for(gateway, url=f"http://127.0.0.1:{proxy.port}")
        keys = [e.key(i) for i in range(4)]
        objs = [e.chunk() for _ in keys]
        e.store(keys, objs)
        proxy.keep = 0.6
        got = e.backend.batched_get_blocking(keys)
        assert got[2] is None and got[3] is None
        for i in (0, 1):
            assert got[i] is not None and same_bytes(got[i], objs[i])
            got[i].ref_count_down()
