"""What benchmarks/lmcache_compare.py runs each route on: LMCache's engine (config, metadata,
loop thread, CPU allocator, RemoteBackend) with the s3kv plugin or LMCache's S3 connector, the
gateway processes, and the host names LMCache's S3 connector needs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.servers import BenchServer, free_port

ROOT = Path(__file__).resolve().parent.parent
DOMAIN = "s3.localtest"
GW_BUCKET, DIRECT_BUCKET, BACKEND_BUCKET = "lmcgw", "lmcdirect", "lmcbackend"
ACCESS, SECRET = "lmcbenchaccess", "lmcbench/secret0123456789"
LLAMA3_8B = (32, 2, 256, 8, 128)  # layers, K/V, tokens per chunk, KV heads, head dim
LOOKUP = (2, 2, 16, 2, 64)  # the lookup prefix's chunks: small, a lookup moves no data
ROUTES = ("plugin", "s3_gateway", "s3_direct")
DRAM_ROUTE = "plugin_dram"
DIRECT_READS_ROUTE = "plugin_direct_reads"
#: the routes on the s3kv plugin (the rest are LMCache's S3 connector)
PLUGIN_ROUTES = ("plugin", DRAM_ROUTE, DIRECT_READS_ROUTE)


@contextlib.contextmanager
def hosts_entry(names: list[str], enabled: bool) -> Iterator[None]:
    """Make ``names`` resolve to 127.0.0.1 for the run (``--hosts-entry``), then undo it."""
    import socket

    missing = []
    for n in names:
        try:
            socket.getaddrinfo(n, 80)
        except OSError:
            missing.append(n)
    if missing and not enabled:
        raise SystemExit(f"{', '.join(missing)} do not resolve: add '127.0.0.1 "
                         f"{' '.join(missing)}' to /etc/hosts or pass --hosts-entry")
    line = f"127.0.0.1 {' '.join(missing)}  # benchmarks/lmcache_compare.py\n"
    if missing:
        with open("/etc/hosts", "a") as fh:
            fh.write(line)
    try:
        yield
    finally:
        if missing:
            text = Path("/etc/hosts").read_text()
            Path("/etc/hosts").write_text(text.replace(line, ""))


@contextlib.contextmanager
def gateway(server: BenchServer, prefix: str = "kv", dram_cache: str = "0",
            direct_reads: int = 0) -> Iterator[tuple[str, int]]:
    """A ``s3kv serve`` process on the server's backend bucket, answering virtual-hosted S3."""
    port = free_port()
    env = {**os.environ, **server.env(), "S3KV_ACCESS_KEY": ACCESS, "S3KV_SECRET_KEY": SECRET,
           "PYTHONPATH": str(ROOT)}
    log = tempfile.NamedTemporaryFile(prefix="lmc-gateway-", suffix=".log",  # noqa: SIM115
                                      delete=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3kv.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--store", f"s3://{BACKEND_BUCKET}/{prefix}?endpoint={server.url}", "--domain", DOMAIN,
         "--segment-size", "256MiB", "--part-size", "16MiB", "--max-block-size", "64MiB",
         # LMCache's S3 connector PUTs a whole session at once (40 x 32 MiB) and does not
         # retry a 503 SlowDown: with the default 512 MiB of request bodies it loses chunks
         "--max-request-memory", "2GiB", "--dram-cache", dram_cache,
         "--direct-reads", str(direct_reads),
         "--sync-interval", "0", "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"gateway did not start; see {log.name}") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)


#: engines on LMCache's S3 connector, which cannot be closed: kept for the process's life
_LEFT_OPEN: list[Engine] = []


class Engine:
    """LMCache's config, metadata, loop thread, CPU allocator and RemoteBackend for one route."""

    def __init__(self, route: str, kv_shape: tuple[int, int, int, int, int], urls: dict[str, str],
                 server: BenchServer, cpu_gib: float) -> None:
        import torch
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.metadata import LMCacheMetadata
        from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
        from lmcache.v1.storage_backend.remote_backend import RemoteBackend

        cfg: dict[str, Any] = {"chunk_size": kv_shape[2], "local_cpu": False,
                               "max_local_cpu_size": cpu_gib, "remote_serde": "naive",
                               "blocking_timeout_secs": 120}
        if route in PLUGIN_ROUTES:
            cfg["remote_storage_plugins"] = ["s3kv"]
            cfg["extra_config"] = {
                "remote_storage_plugin.s3kv.module_path": "s3kv.integrations.lmcache",
                "remote_storage_plugin.s3kv.class_name": "S3KVConnector",
                "s3kv_url": urls[route], "s3kv_namespace": GW_BUCKET,
                "s3kv_access_key": ACCESS, "s3kv_secret_key": SECRET, "s3kv_timeout": 300,
                # a store phase measures what is stored: wait out push-back instead of
                # dropping after the default 5 s (an engine would rather drop)
                "s3kv_put_within": 300}
        else:
            gw = route == "s3_gateway"
            cfg["remote_url"] = urls[route]
            cfg["extra_config"] = {
                "s3_region": server.region, "disable_tls": True, "s3_prefer_http2": False,
                "s3_num_io_threads": 8, "save_chunk_meta": False,
                "aws_access_key_id": ACCESS if gw else server.access_key,
                "aws_secret_access_key": SECRET if gw else server.secret_key}
        self.config = LMCacheEngineConfig.from_dict(cfg)
        self.metadata = LMCacheMetadata(
            model_name="meta-llama/Meta-Llama-3-8B", world_size=1, local_world_size=1,
            worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16, kv_shape=kv_shape,
            chunk_size=kv_shape[2])
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.cpu = LocalCPUBackend(self.config, self.metadata)
        self.backend = RemoteBackend(self.config, self.metadata, self.loop, self.cpu, "cpu",
                                     plugin_name="s3kv" if route in PLUGIN_ROUTES else None)
        self.route = route

    def keys(self, n: int, salt: int) -> list[Any]:
        import torch
        from lmcache.utils import CacheEngineKey

        return [CacheEngineKey(self.metadata.model_name, 1, 0, (salt << 32) + i, torch.bfloat16)
                for i in range(n)]

    def chunks(self, n: int, rng: np.random.Generator) -> list[Any]:
        out = []
        for _ in range(n):
            obj = self.cpu.allocate(self.metadata.get_shapes(), self.metadata.get_dtypes())
            assert obj is not None, "raise --cpu-gib: LMCache's allocator is full"
            buf = memoryview(obj.byte_array).cast("B")
            buf[:] = rng.integers(0, 256, len(buf), dtype=np.uint8).tobytes()
            out.append(obj)
        return out

    def store(self, keys: list[Any], objs: list[Any]) -> None:
        """batched_submit_put_task until LMCache reports each key's write done (its per-key
        completion callback; the S3 connector has no batched put, one put per chunk)."""
        done = threading.Semaphore(0)
        self.backend.batched_submit_put_task(keys, objs,
                                             on_complete_callback=lambda _k: done.release())
        for _ in keys:
            if not done.acquire(timeout=600):
                raise SystemExit(f"{self.route}: LMCache's puts did not finish in 600 s")

    def close(self) -> None:
        """The plugin closes at once; LMCache's S3 connector's close never returns, so for it
        the loop is left running (a daemon thread) instead, and the engine kept with it: once
        collected, its backend's pending tasks would each be reported "Task was destroyed but
        it is pending!"."""
        if self.route in PLUGIN_ROUTES:
            self.backend.close()
            self.loop.call_soon_threadsafe(self.loop.stop)
        else:
            _LEFT_OPEN.append(self)
