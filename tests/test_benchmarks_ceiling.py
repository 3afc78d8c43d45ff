"""benchmarks/gateway_ceiling.py: its bare aiohttp server serves what its clients verify, and a
tiny end-to-end run prints the issue's keys with positive ratios (never absolute figures: this
machine is shared)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer

from benchmarks.aiohttp_sink import make_app
from benchmarks.ceiling_native import NAMESPACE, Blocks
from benchmarks.proc_sampler import Sampler
from s3kv.client import S3KVClient
from warp.config import DEFAULT_SEED
from warp.payload import Hasher, PayloadSource, variant_of

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gateway_ceiling.py"
RATIOS = ("put_ratio_256KiB", "get_ratio_256KiB", "batch_put_ratio_256KiB",
          "batch_get_ratio_256KiB")
CPU = ("gateway_cpu_s_per_gib_put_256KiB", "gateway_cpu_ms_per_put_256KiB")


async def test_bare_server_serves_the_bytes_the_load_generator_verifies() -> None:
    size, key = 3 * (1 << 20) + 17, "warp/run/set/00000001.obj"  # spans several slices
    src = PayloadSource(DEFAULT_SEED)
    async with TestServer(make_app()) as server, aiohttp.ClientSession() as http:
        url = str(server.make_url(f"/bucket/{key}"))
        async with http.put(url, data=b"x" * size) as resp:
            assert resp.status == 200
        async with http.get(url) as resp:
            body = await resp.read()
        h = Hasher()
        h.update(body)
        assert (len(body), h.digest()) == (size, src.expected(variant_of(key), 0, size).checksum)
        async with http.head(url) as resp:
            assert resp.status == 200 and resp.headers["Content-Length"] == str(size)
        async with http.get(str(server.make_url("/bucket/never-put"))) as resp:
            assert resp.status == 404


async def test_bare_server_native_batches_round_trip() -> None:
    blocks = Blocks(64 * 1024)
    keys = [f"k{i:03d}" for i in range(20)]
    async with TestServer(make_app()) as server, \
            S3KVClient(str(server.make_url("")).rstrip("/")) as kv:
        assert await kv.create_namespace(NAMESPACE)
        assert await kv.put_many(NAMESPACE, [(k, blocks.of(k)) for k in keys]) == len(keys)
        got = [item async for item in kv.iter_many(NAMESPACE, [*keys[::-1], "absent"])]
    assert got == [*((k, blocks.of(k)) for k in keys[::-1]), ("absent", None)]
    assert len({blocks.of(k) for k in keys}) > 1  # keys map onto distinct payloads


def test_gateway_ceiling_tiny_run_json() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "256KiB", "--batch", "4", "--duration", "0.3",
         "--repeats", "1", "--set-bytes", "2MiB", "--capacity", "512MiB", "--fill", "24MiB",
         "--warmup", "0.2", "--json"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout[-2000:]
    doc = json.loads(lines[0])
    expected = {*RATIOS, *CPU}
    assert set(doc) == expected | {f"{k}_md5" for k in expected} | {"detail", "settings"}
    for key in (*RATIOS, *CPU):
        for name in (key, f"{key}_md5"):
            assert isinstance(doc[name], float) and doc[name] > 0, (name, doc[name])
    for label in ("put_256KiB", "get_256KiB", "batch_put_256KiB", "batch_get_256KiB"):
        entry = doc["detail"][label]
        for mode in ("fast", "md5"):  # each ratio is the median of its interleaved repeats
            runs = entry[f"ratio_{mode}_repeats"]
            assert len(runs) == 1 and entry[f"ratio_{mode}"] == statistics.median(runs)
        for side in ("bare", "fast", "md5"):
            figures = entry[side]
            for name in ("MiB_s", "ops_s", "client_cpu_s_per_GiB", "server_cpu_ms_per_op",
                         "peak_rss_MiB"):
                assert figures[name] > 0, (label, side, name)
            # the process's own memory, apart from the store's mapped pages, is part of it
            assert 0 < figures["peak_anon_MiB"] <= figures["peak_rss_MiB"], (label, side)
            # the event loop's share (the main thread's CPU) is part of the process's, to
            # within /proc's resolution: both counters are whole clock ticks (10 ms), so over
            # a window of a few hundred ops each can be a tick off (CI read 0.630 ms per op on
            # the loop against 0.567 for the whole process: 150 GETs, one tick apart)
            tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
            assert 0 <= figures["server_loop_cpu_ms_per_op"] <= figures[
                "server_cpu_ms_per_op"] + 2 * tick_ms / figures["ops"] + 0.001, (label, side)
    assert doc["put_ratio_256KiB"] == doc["detail"]["put_256KiB"]["ratio_fast"]
    assert doc["gateway_cpu_ms_per_put_256KiB_md5"] == \
        doc["detail"]["put_256KiB"]["md5"]["server_cpu_ms_per_op"]
    assert "--etag" in doc["settings"]["gateway_args"]
    assert doc["settings"]["fill"] == "24MiB"
    assert "filling the fast gateway's store with 24MiB" in proc.stderr
    assert "batch_get_256KiB repeat 1/1 md5" in proc.stderr  # the progress lines
    assert "put_256KiB fast: warm-up 0.2 s (untimed)" in proc.stderr
    assert doc["settings"]["warmup_s"] == 0.2


def test_gateway_ceiling_help_lists_every_flag() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, check=True)
    for flag in ("--sizes", "--batch-block", "--batch", "--concurrent", "--duration",
                 "--repeats", "--warmup", "--set-bytes", "--capacity", "--gateway-args",
                 "--shm-dir", "--quick", "--json"):
        assert flag in proc.stdout, flag


def test_sampler_counts_the_main_thread_apart() -> None:
    """``loops``: the main thread's CPU on its own, beside the whole process's."""

    def spin(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    with Sampler({"me": os.getpid()}, period=0.02, loops=("me",)) as sampler:
        t0 = time.time_ns()
        worker = threading.Thread(target=spin, args=(0.3,))
        worker.start()
        worker.join()
        t1 = time.time_ns()
        spin(0.3)
        t2 = time.time_ns()
    in_worker, in_main = sampler.cpu_between(t0, t1), sampler.cpu_between(t1, t2)
    assert in_worker["me"] >= 0.25 and in_worker["me_loop"] < 0.1, in_worker
    assert in_main["me"] >= 0.25 and in_main["me_loop"] >= 0.25, in_main
