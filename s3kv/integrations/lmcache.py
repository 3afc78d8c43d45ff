"""LMCache remote storage plugin on the gateway's native API (``pip install 's3kv[lmcache]'``).

LMCache's remote storage plugin framework loads it from its config::

    remote_storage_plugins: ["s3kv"]
    extra_config:
      remote_storage_plugin.s3kv.module_path: s3kv.integrations.lmcache
      remote_storage_plugin.s3kv.class_name: S3KVConnector
      s3kv_url: http://s3kv-headless.kv.svc:9470     # or URL,URL,... (or S3KV_URL)
      s3kv_namespace: llama-3-8b                     # (or S3KV_NAMESPACE)
      s3kv_access_key: ...                           # (or S3KV_ACCESS_KEY)
      s3kv_secret_key: ...                           # (or S3KV_SECRET_KEY)
      s3kv_direct_reads: true                        # read located blocks from the object
                                                     # store itself (gateway --direct-reads)

One chunk is one block: LMCache's ``CacheEngineKey.to_string()`` is the block key inside the
namespace, and the block holds LMCache's remote metadata header (length, shapes, dtypes, format)
followed by the chunk's bytes, so partial chunks come back with their own shape. Lookups are one
prefix-lookup request per home gateway for the whole key list; gets are one streamed batch get,
each block written into the MemoryObj LMCache's allocator hands out as its bytes arrive (or,
from a gateway run with ``--direct-reads``, the blocks it locates in sealed segments read
straight from the object store by presigned ranged GETs and checked against their CRCs, the rest
by batch get: s3kv/client_direct.py); puts are
one batch put that honours push-back for ``s3kv_put_within`` seconds, then drops what is left (a
cache may lose a write, it never blocks the engine). Nothing raises into the engine: a gateway
that cannot be reached makes misses and dropped puts, logged.

LMCache calls the asynchronous methods on its own event loop (``loop``) and the synchronous ones
(``batched_contains``, ``exists_sync``, ``remove_sync``) from engine threads; those run their
coroutine on that loop and wait a bounded time.
"""

from __future__ import annotations

import asyncio
import builtins
import struct
from collections.abc import Coroutine, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.protocol import RemoteMetadata
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from s3kv.client import BlockBody, S3KVClient
from s3kv.errors import ConfigError, NamespaceNotFound, S3KVError
from s3kv.integrations.lmcache_settings import PluginSettings, plugin_variables
from s3kv.log import get_logger

__all__ = ["PluginSettings", "S3KVConnector", "plugin_variables"]

log = get_logger(__name__)
T = TypeVar("T")

#: how often a namespace that could not be created (gateway down) is tried again, seconds
_CREATE_EVERY = 5.0


class S3KVConnector(RemoteConnector):
    """LMCache ``RemoteConnector`` on s3kv's native API (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, local_cpu_backend: Any,
                 config: Any) -> None:
        # DynamicConnectorAdapter passes no metadata: the allocator backend carries it
        super().__init__(config, local_cpu_backend.metadata)
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self.settings = PluginSettings.from_config(config)
        self.namespace = self.settings.namespace
        self.dropped_puts = 0
        self._client = S3KVClient(self.settings.url, token=self.settings.token,
                                  timeout=self.settings.timeout,
                                  lookup_timeout=self.settings.lookup_timeout,
                                  down_for=self.settings.down_for,
                                  connections=self.settings.connections,
                                  direct_reads=self.settings.direct_reads)
        self._opened = False
        self._closed = False
        self._namespace_ready = False
        self._create_after = 0.0
        log.info("lmcache.s3kv.init", url=self.settings.url, namespace=self.namespace)

    # ---- plumbing ----------------------------------------------------------------------------
    async def _kv(self, *, writing: bool = False) -> S3KVClient:
        """The client, its session opened on LMCache's loop; before a write, the namespace
        created once (a try takes at most the lookup timeout: reads never wait for one, a
        missing namespace is misses, so a hung gateway costs a lookup no more than that)."""
        if self._closed:
            raise ConfigError("the s3kv connector is closed")
        if not self._opened:
            await self._client.open()
            self._opened = True
        if writing and not self._namespace_ready and self.loop.time() >= self._create_after:
            try:
                async with asyncio.timeout(self.settings.lookup_timeout):
                    await self._client.create_namespace(self.namespace)
                self._namespace_ready = True
            except (S3KVError, TimeoutError) as exc:
                self._create_after = self.loop.time() + _CREATE_EVERY
                log.warning("lmcache.s3kv.namespace_unavailable", namespace=self.namespace,
                            error=str(exc) or type(exc).__name__)
        return self._client

    def _sync(self, coro: Coroutine[Any, Any, T], default: T) -> T:
        """Run ``coro`` on LMCache's loop from an engine thread; ``default`` past the time."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:  # called on the loop itself: waiting would deadlock it
            coro.close()
            log.error("lmcache.s3kv.sync_on_loop")
            return default
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(self.settings.lookup_timeout + 1.0)
        except FutureTimeout:
            future.cancel()
            log.warning("lmcache.s3kv.sync_timeout")
            return default

    def _keys(self, keys: Sequence[CacheEngineKey]) -> list[str]:
        return [k.to_string() for k in keys]

    # ---- lookups -----------------------------------------------------------------------------
    async def _prefix(self, keys: Sequence[CacheEngineKey]) -> int:
        if not keys:
            return 0
        try:
            kv = await self._kv()
            return await kv.lookup_prefix(self.namespace, self._keys(keys))
        except NamespaceNotFound:
            self._namespace_ready = False
            return 0
        except S3KVError as exc:
            log.warning("lmcache.s3kv.lookup_failed", keys=len(keys), error=str(exc))
            return 0

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: list[CacheEngineKey]) -> int:
        return self._sync(self._prefix(keys), 0)

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: list[CacheEngineKey],
                                     pin: bool = False) -> int:
        return await self._prefix(keys)

    async def exists(self, key: CacheEngineKey) -> bool:
        return await self._prefix([key]) == 1

    def exists_sync(self, key: CacheEngineKey) -> bool:
        return self._sync(self._prefix([key]), 0) == 1

    # ---- gets --------------------------------------------------------------------------------
    async def _place(self, body: BlockBody) -> MemoryObj | None:
        """A MemoryObj from LMCache's allocator holding this block, or None (a miss)."""
        if self.save_chunk_meta:
            if body.length < self.remote_metadata_bytes:
                return None
            head = await body.readexactly(self.remote_metadata_bytes)
            try:  # a header LMCache did not write (a format, a dtype it does not know): a miss
                meta = RemoteMetadata.deserialize(head)
            except (struct.error, KeyError, ValueError) as exc:
                log.warning("lmcache.s3kv.bad_block", length=body.length, error=repr(exc))
                return None
            if meta.length != body.remaining:
                log.warning("lmcache.s3kv.bad_block", length=body.length, declared=meta.length)
                return None
            obj = self.local_cpu_backend.allocate(meta.shapes, meta.dtypes, meta.fmt,
                                                  busy_loop=False)
        else:
            obj = self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes,
                                                  self.meta_fmt, busy_loop=False)
        if obj is None:
            log.warning("lmcache.s3kv.allocation_failed", length=body.length)
            return None
        try:
            buf = memoryview(obj.byte_array).cast("B")  # ctypes' "<B" -> plain bytes
            if body.remaining > len(buf) or (self.save_chunk_meta
                                             and body.remaining != len(buf)):
                raise ValueError(f"block of {body.remaining} bytes for a buffer of {len(buf)}")
            size = body.remaining
            await body.readinto(buf[:size])  # straight into LMCache's buffer
            if not self.save_chunk_meta:
                obj = self.reshape_partial_chunk(obj, size)
        except BaseException:
            obj.ref_count_down()
            raise
        return obj

    async def _fetch(self, keys: Sequence[CacheEngineKey]) -> list[MemoryObj | None]:
        objs: list[MemoryObj | None] = [None] * len(keys)

        async def sink(i: int, body: BlockBody | None) -> None:
            if body is not None:
                try:
                    objs[i] = await self._place(body)
                except ValueError as exc:
                    log.warning("lmcache.s3kv.bad_block", error=str(exc))

        done = [False] * len(keys)  # filled in as blocks arrive: a broken stream keeps those
        try:
            kv = await self._kv()
            await kv.fetch(self.namespace, self._keys(keys), sink, done)
        except S3KVError as exc:
            log.warning("lmcache.s3kv.get_failed", keys=len(keys), error=str(exc))
        finally:  # also on cancellation: nothing half-filled leaks out of the allocator
            for i, obj in enumerate(objs):
                if obj is not None and not done[i]:
                    obj.ref_count_down()
                    objs[i] = None
        return objs

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: list[CacheEngineKey]) -> list[MemoryObj | None]:
        return await self._fetch(keys)

    async def get(self, key: CacheEngineKey) -> MemoryObj | None:
        return (await self._fetch([key]))[0]

    def support_batched_get_non_blocking(self) -> bool:
        return True

    async def batched_get_non_blocking(self, lookup_id: str, keys: list[CacheEngineKey]
                                       ) -> list[MemoryObj]:
        """The leading chunks that were read; the ones after the first miss are released."""
        objs = await self._fetch(keys)
        n = next((i for i, o in enumerate(objs) if o is None), len(objs))
        for obj in objs[n:]:
            if obj is not None:
                obj.ref_count_down()
        return [o for o in objs[:n] if o is not None]

    # ---- puts --------------------------------------------------------------------------------
    def _block(self, obj: MemoryObj) -> tuple[bytes | memoryview, ...]:
        buf = memoryview(obj.byte_array).cast("B")
        if not self.save_chunk_meta:
            return (buf,)
        head = RemoteMetadata(len(buf), obj.get_shapes(), obj.get_dtypes(),
                              obj.get_memory_format()).serialize()
        return (head, buf)

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: list[CacheEngineKey], memory_objs: list[MemoryObj]
                          ) -> None:
        """Store the chunks; what the gateway does not take within ``put_within`` seconds is
        dropped (counted, logged). The caller (LMCache) owns the MemoryObjs' references."""
        if not keys:
            return
        items = list(zip(self._keys(keys), (self._block(o) for o in memory_objs), strict=True))
        try:
            kv = await self._kv(writing=True)
            stored = await kv.put_each(self.namespace, items, within=self.settings.put_within)
        except NamespaceNotFound:
            self._namespace_ready = False
            stored = [False] * len(items)
        except S3KVError as exc:
            log.warning("lmcache.s3kv.put_failed", keys=len(keys), error=str(exc))
            stored = [False] * len(items)
        lost = stored.count(False)
        if lost:
            self.dropped_puts += lost
            log.warning("lmcache.s3kv.puts_dropped", dropped=lost, of=len(items))

    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj) -> None:
        await self.batched_put([key], [memory_obj])

    # ---- the rest ----------------------------------------------------------------------------
    async def _remove(self, key: CacheEngineKey) -> bool:
        try:
            kv = await self._kv()
            return await kv.delete_many(self.namespace, [key.to_string()]) > 0
        except S3KVError as exc:
            log.warning("lmcache.s3kv.remove_failed", error=str(exc))
            return False

    def remove_sync(self, key: CacheEngineKey) -> bool:
        return self._sync(self._remove(key), False)

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        """0 when every gateway answers /readyz, 1 otherwise."""
        try:
            kv = await self._kv()
            return 0 if await kv.ready() else 1
        except S3KVError:
            return 1

    async def close(self) -> None:
        """Close the HTTP session; returns at once (nothing is waited for on the gateways)."""
        self._closed = True
        await self._client.close()

    async def list(self) -> builtins.list[str]:  # LMCache's name
        keys: builtins.list[str] = []
        try:
            kv = await self._kv()
            while True:
                page = await kv.list_keys(self.namespace, after=keys[-1] if keys else "",
                                          limit=4096)
                keys.extend(page)
                if len(page) < 4096:
                    return keys
        except S3KVError as exc:
            log.warning("lmcache.s3kv.list_failed", error=str(exc))
            return keys

    def __repr__(self) -> str:
        return f"<S3KVConnector {self.settings.url} ns={self.namespace}>"
