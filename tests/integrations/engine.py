"""LMCache's own storage objects on CPU, wired as an engine wires them, for the plugin tests.

``Engine`` builds LMCache's ``LMCacheEngineConfig`` and ``LMCacheMetadata`` for a model geometry,
runs LMCache's event loop in its own thread (as LMCache's storage manager does), and creates
LMCache's ``LocalCPUBackend`` (the allocator) and ``RemoteBackend`` with ``plugin_name="s3kv"``,
which loads ``s3kv.integrations.lmcache.S3KVConnector`` through the remote storage plugin
framework. Tests drive the RemoteBackend only, as LMCache's storage manager would.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
from lmcache.v1.storage_backend.remote_backend import RemoteBackend

#: Llama-3-8B: 32 layers, K and V, 256 tokens a chunk, 8 KV heads of 128, bf16 -> 32 MiB a chunk
LLAMA3_8B = (32, 2, 256, 8, 128)
#: a small geometry for tests that need many chunks: 2 layers, 16 tokens, 2 heads of 64 (16 KiB)
SMALL = (2, 2, 16, 2, 64)


def plugin_extra(url: str, namespace: str, token: tuple[str, str], **more: Any
                 ) -> dict[str, Any]:
    """The ``extra_config`` docs/lmcache.md gives users."""
    return {"remote_storage_plugin.s3kv.module_path": "s3kv.integrations.lmcache",
            "remote_storage_plugin.s3kv.class_name": "S3KVConnector",
            "s3kv_url": url, "s3kv_namespace": namespace,
            "s3kv_access_key": token[0], "s3kv_secret_key": token[1], **more}


class Engine:
    def __init__(self, url: str, namespace: str, token: tuple[str, str], *,
                 kv_shape: tuple[int, int, int, int, int] = SMALL, cpu_gib: float = 0.25,
                 blocking_timeout: int = 10, diagnose: Callable[[], str] | None = None,
                 **extra: Any) -> None:
        self.kv_shape = kv_shape
        self.diagnose = diagnose  # what to show when a store drops puts (the gateway's log)
        self.config = LMCacheEngineConfig.from_dict({
            "chunk_size": kv_shape[2], "local_cpu": False, "max_local_cpu_size": cpu_gib,
            "remote_serde": "naive", "blocking_timeout_secs": blocking_timeout,
            "remote_storage_plugins": ["s3kv"],
            "extra_config": plugin_extra(url, namespace, token, **extra)})
        self.metadata = LMCacheMetadata(
            model_name="meta-llama/Meta-Llama-3-8B", world_size=1, local_world_size=1,
            worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16, kv_shape=kv_shape,
            chunk_size=kv_shape[2])
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.cpu = LocalCPUBackend(self.config, self.metadata)
        self.backend = RemoteBackend(self.config, self.metadata, self.loop, self.cpu, "cpu",
                                     plugin_name="s3kv")
        self._rng = np.random.default_rng(18)

    @property
    def connector(self) -> Any:
        """The S3KVConnector LMCache created (inside its instrumentation wrapper)."""
        assert self.backend.connection is not None
        return self.backend.connection.getWrappedConnector()

    def key(self, i: int, salt: int = 0) -> CacheEngineKey:
        return CacheEngineKey(self.metadata.model_name, 1, 0, (salt << 32) + i,
                              torch.bfloat16)

    def chunk(self, tokens: int | None = None) -> Any:
        """A MemoryObj from LMCache's allocator full of random bytes (``tokens``: partial)."""
        shapes = self.metadata.get_shapes(tokens)
        obj = self.cpu.allocate(shapes, self.metadata.get_dtypes())
        assert obj is not None, "LMCache's CPU allocator is full"
        buf = memoryview(obj.byte_array).cast("B")
        buf[:] = self._rng.integers(0, 256, len(buf), dtype=np.uint8).tobytes()
        return obj

    def store(self, keys: Sequence[CacheEngineKey], objs: Sequence[Any],
              timeout: float = 120.0, *, may_drop: bool = False) -> None:
        """batched_submit_put_task, then wait until LMCache reports every key's write done
        (its per-key completion callback, called when the connector's batched_put returns).
        Unless ``may_drop``, a put the plugin dropped fails here, with the gateway's log."""
        dropped = self.connector.dropped_puts
        done = threading.Semaphore(0)
        self.backend.batched_submit_put_task(list(keys), list(objs),
                                             on_complete_callback=lambda _k: done.release())
        for _ in keys:
            assert done.acquire(timeout=timeout), "LMCache's put did not finish"
        lost = self.connector.dropped_puts - dropped
        if lost and not may_drop:
            log = self.diagnose() if self.diagnose is not None else "(no log)"
            raise AssertionError(f"the plugin dropped {lost} of {len(keys)} puts; the "
                                 f"gateway's log ends:\n{log}")

    def close(self) -> float:
        """Close the backend as LMCache does at shutdown; the seconds it took."""
        start = time.monotonic()
        self.backend.close()
        took = time.monotonic() - start
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        return took


def same_bytes(a: Any, b: Any) -> bool:
    return bytes(memoryview(a.byte_array).cast("B")) == bytes(memoryview(b.byte_array).cast("B"))
