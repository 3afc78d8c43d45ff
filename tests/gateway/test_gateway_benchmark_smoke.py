"""Smoke test of benchmarks/gateway.py: the --quick profile against moto, JSON shape only (no
ratio is asserted: moto on a shared 2-core machine predicts nothing), with either S3 client
(--client aiobotocore or warp); both clients answer a benchmark side the same way
(benchmarks/s3_clients.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from botocore.exceptions import ClientError

from benchmarks.gateway_phases import restore_cpu
from benchmarks.harness import CPUMeter, S3Side
from benchmarks.s3_clients import CLIENTS, open_client
from tests.support.benchmarks import run_json

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"put_ratio_256KiB_c1", "put_ratio_256KiB_c8", "get_ratio_2MiB_c1", "get_ratio_2MiB_c8",
        "restore_ratio"}
#: what each phase is costed by: the processes, and the machine's CPUs (benchmarks/cores.py)
COSTED = {"client", "gateway", "server", "machine", "interrupts", "steal", "other",
          *(f"cpu{i}" for i in range(psutil.cpu_count()))}


def test_gateway_benchmark_quick_json() -> None:
    # 32 MiB per phase (--quick's default is 4 MiB): psutil counts 10 ms ticks, and the two
    # 2 MiB GETs of 4 MiB may cost a process less than one tick on both repeats (CI read 0.0
    # for the gateway once and for the direct side's server once); sixteen do not
    doc = run_json("gateway.py", "--server", "moto", "--quick", "--repeats", "2",
                   "--volume", "32MiB")
    assert set(doc) >= KEYS, sorted(doc)
    assert doc["client"] == "aiobotocore" and doc["payload"] == "signed"
    for key in KEYS:
        assert isinstance(doc[key], float) and doc[key] > 0, (key, doc[key])
    assert doc["server"].startswith("moto")
    assert doc["repeats"] == 2
    for key in KEYS:  # the figure is the median of the repeats' values
        runs = doc["per_repeat"][key]
        assert len(runs) == 2 and doc[key] == (runs[0] + runs[1]) / 2, (key, runs)
    assert doc["restore_block_bytes"] == 56 * 1024 * 16
    for name in ("gateway_put_MiBps_256KiB_c1", "direct_get_MiBps_2MiB_c8",
                 "restore_batch_s", "restore_per_block_direct_c8_s"):
        assert doc[name] > 0, name
    # every PUT phase is costed per process; moto counts no requests, so that ratio is null
    assert doc["split_cores"] is False
    assert doc["direct_put_server_cpu_s_per_GiB_256KiB_c8"] > 0
    ratio = doc["backend_cpu_ratio_put_256KiB"]
    assert isinstance(ratio, (int, float)) and ratio >= 0
    assert doc["backend_requests_ratio_put_256KiB"] is None
    assert doc["gateway_put_requests_per_GiB_256KiB_c8"] is None
    cpu = doc["gateway_put_cpu_s_per_GiB_256KiB_c8"]
    assert set(cpu) == COSTED
    # the direct phase is not charged with the gateway's work: the gateway sits idle then, and
    # its timers (eviction, sync) cost at most a psutil tick or two (0.32 CPU-s per GiB, one
    # 10 ms tick over the 32 MiB phase, was read once on a loaded machine)
    idle = doc["direct_put_cpu_s_per_GiB_256KiB_c8"]["gateway"]
    assert cpu["gateway"] > 0 and idle < cpu["gateway"] / 10, (idle, cpu["gateway"])
    # and every GET phase: the gateway's own CPU only on its side
    got = doc["gateway_get_cpu_s_per_GiB_2MiB_c8"]
    assert set(got) == COSTED and got["gateway"] > 0
    # the machine's busy time covers the named processes' (to a tick per process and CPU)
    assert got["machine"] + 0.01 * (3 + psutil.cpu_count()) * 1024 / 32 >= (
        got["client"] + got["gateway"] + got["server"])
    # the idle gateway's timers may cost one psutil tick in the direct phase too (10 ms over
    # its 32 MiB: 0.32 CPU-s per GiB, read once on a loaded machine), never more
    assert doc["direct_get_cpu_s_per_GiB_2MiB_c8"]["gateway"] <= round(0.01 * 1024 / 32, 2)
    assert doc["direct_get_server_cpu_s_per_GiB_2MiB_c8"] > 0
    assert "gateway_get_server_bytes_in_per_GiB_2MiB_c8" not in doc
    # the restore is costed per process too (psutil counts 10 ms ticks: a quick restore may
    # read 0; each figure is its own median over the repeats, so busy is not checked against
    # the medians of the other two: test_restore_cpu_per_process does that)
    for kind in ("batch", "per_block"):
        for name in ("client", "gateway", "server", "machine", "interrupts", "other"):
            assert doc[f"restore_{kind}_{name}_cpu_s"] >= 0, (kind, name)
        assert doc[f"restore_{kind}_server_busy"] >= 0
        for i in range(psutil.cpu_count()):  # how busy each CPU was (0-1, to a tick)
            assert 0 <= doc[f"restore_{kind}_cpu{i}_busy"] <= 1.5, (kind, i)


def test_gateway_benchmark_quick_json_warp_client() -> None:
    """--client warp: warp.s3's S3Client on both sides (always UNSIGNED-PAYLOAD), recorded;
    with two restore block sizes, each restored beside its own per-block GETs."""
    doc = run_json("gateway.py", "--server", "moto", "--quick", "--client", "warp",
                   "--restore-block-tokens", "4,16")
    assert doc["client"] == "warp" and doc["payload"] == "unsigned"
    assert set(doc) >= KEYS, sorted(doc)
    for key in KEYS:  # sane: both sides did the work; within two orders of magnitude
        assert isinstance(doc[key], float) and 0.01 < doc[key] < 100, (key, doc[key])
    for name in ("gateway_put_MiBps_256KiB_c8", "direct_put_MiBps_256KiB_c8",
                 "gateway_get_MiBps_2MiB_c1", "direct_get_MiBps_2MiB_c1", "restore_batch_s"):
        assert doc[name] > 0, name
    cpu = doc["gateway_put_cpu_s_per_GiB_256KiB_c8"]
    assert set(cpu) == COSTED and cpu["gateway"] > 0
    assert doc["gateway_put_slowdowns"] >= 0 and doc["direct_put_slowdowns"] >= 0
    # the first size is the headline restore; each size's figures are kept under its own keys
    assert doc["restore_block_tokens"] == [4, 16]
    assert doc["restore_block_bytes"] == doc["restore_block_bytes_4tok"] == 56 * 1024 * 4
    assert doc["restore_block_bytes_16tok"] == 56 * 1024 * 16
    assert doc["restore_ratio"] == doc["restore_ratio_4tok"]
    for t in (4, 16):
        for key in ("restore_ratio", "restore_batch_s", "restore_per_block_direct_c8_s"):
            assert doc[f"{key}_{t}tok"] > 0, (key, t)
        assert doc[f"restore_batch_server_cpu_s_{t}tok"] >= 0


@pytest.mark.parametrize(("sizes", "message"), [
    ("0", "positive token count"), ("16,16", "once"), ("4,x", "expected token counts"),
    ("2", "more blocks than one batch get takes")])
def test_gateway_benchmark_refuses_restore_block_sizes(sizes: str, message: str) -> None:
    """Block sizes that cannot be restored are refused before any server starts (10,000
    tokens in 2-token blocks are 5,000 keys, more than one batch get takes)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gateway.py"), "--server", "moto",
         "--restore-block-tokens", sizes],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_gateway_benchmark_warp_client_is_unsigned_only() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gateway.py"), "--server", "moto",
         "--client", "warp", "--payload", "signed"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert proc.returncode == 2 and "UNSIGNED-PAYLOAD" in proc.stderr, proc.stderr


def slow_store() -> web.Application:
    """A bucket that answers each key's first two PUTs 503 SlowDown (Retry-After: 0)."""
    objects: dict[str, bytes] = {}
    refused: dict[str, int] = {}

    async def put(request: web.Request) -> web.Response:
        key, body = request.match_info["key"], await request.read()
        if refused.get(key, 0) < 2:
            refused[key] = refused.get(key, 0) + 1
            return web.Response(status=503, headers={"Retry-After": "0"},
                                body=b"<Error><Code>SlowDown</Code></Error>")
        objects[key] = body
        return web.Response()

    async def get(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        if key not in objects:
            return web.Response(status=404, body=b"<Error><Code>NoSuchKey</Code></Error>")
        return web.Response(body=objects[key])

    async def bucket(request: web.Request) -> web.Response:
        return web.Response()

    app = web.Application()
    app.router.add_put("/{bucket}", bucket)
    app.router.add_put("/{bucket}/{key:.+}", put)
    app.router.add_get("/{bucket}/{key:.+}", get)
    return app


@pytest.mark.parametrize("client", CLIENTS)
async def test_side_retries_slowdown_and_fails_on_errors(client: str) -> None:
    """Either client: a 503 to a PUT is retried after Retry-After (and counted), the bytes read
    back are the block's, any other error answer fails the phase."""
    blocks = [bytes([i]) * (300_000 + i) for i in range(3)]
    keys = [f"k/{i}" for i in range(3)]
    async with TestServer(slow_store()) as server:
        kwargs = {"endpoint_url": str(server.make_url("")).rstrip("/"),
                  "region_name": "us-east-1", "aws_access_key_id": "a",
                  "aws_secret_access_key": "s"}
        payload = "unsigned" if client == "warp" else "signed"
        async with open_client(client, kwargs, payload=payload) as s3:
            await s3.create_bucket("b")
            side = S3Side(client, s3, "b")
            await side.put_all(keys, blocks, 2)
            # botocore's retries={"max_attempts": 1} is one retry of its own: it hides the
            # first 503 of each PUT, warp's client none
            assert side.slowdowns == len(keys) * (2 if client == "warp" else 1)
            await side.get_all(keys, blocks, 2)
            with pytest.raises((RuntimeError, ClientError)):
                await side.get_all(["absent"], blocks[:1], 1)
            with pytest.raises(RuntimeError, match="read back wrong"):
                await side.get_all(keys[:1], blocks[1:2], 1)


def test_gateway_floor_benchmark_quick_json() -> None:
    """benchmarks/gateway_floor.py: direct, bare aiohttp sink and gateway PUTs in one run; each
    ratio is the median of its repeats, and each side's CPU per PUT is reported."""
    doc = run_json("gateway_floor.py", "--server", "moto", "--quick", "--repeats", "2",
                   "--blocks", "24", "--concurrency", "1,4")
    for c in (1, 4):
        for key in (f"floor_ratio_c{c}", f"gateway_ratio_c{c}", f"gateway_vs_floor_c{c}"):
            runs = doc[f"{key}_repeats"]
            # the median of two repeats is their mean (to the rounding of the printed figures)
            assert len(runs) == 2 and doc[key] == pytest.approx(sum(runs) / 2, abs=1e-3)
        for side, procs in (("direct", ("client", "server")), ("sink", ("client", "sink")),
                            ("gateway", ("client", "gateway", "server"))):
            assert doc[f"{side}_MiBps_c{c}"] > 0
            for name in procs:  # 24 PUTs are a few clock ticks: present, not necessarily > 0
                assert doc[f"{side}_cpu_ms_per_put_{name}_c{c}"] >= 0, (side, name)
            assert doc[f"{side}_cpu_ms_per_put_client_c{c}"] > 0
    assert doc["blocks"] == 24 and doc["server"].startswith("moto")


class _Ticks(CPUMeter):
    """A CPUMeter whose processes report the CPU-seconds given, one sample after another."""

    def __init__(self, samples: list[dict[str, float]]) -> None:
        super().__init__({"client": 1, "gateway": 2, "rgw": 3, "osd": 4}, ("rgw", "osd"))
        self._samples = samples

    def sample(self) -> dict[str, float]:
        return self._samples.pop(0)


def test_restore_cpu_per_process() -> None:
    meter = _Ticks([{"client": 2.0, "gateway": 1.5, "rgw": 3.0, "osd": 1.0}])
    before = {"client": 1.5, "gateway": 1.0, "rgw": 2.25, "osd": 0.5}
    got = restore_cpu(meter, "batch", before, 1.25)
    assert got == {"restore_batch_client_cpu_s": 0.5, "restore_batch_gateway_cpu_s": 0.5,
                   "restore_batch_rgw_cpu_s": 0.75, "restore_batch_osd_cpu_s": 0.5,
                   "restore_batch_server_cpu_s": 1.25, "restore_batch_server_busy": 1.0}
    assert restore_cpu(None, "batch", before, 1.25) == {}


def test_restore_cpu_with_the_machine() -> None:
    """With the machine's counters: its busy time, what ran outside the named processes, and
    how busy each CPU was over the restore."""
    meter = _Ticks([{"client": 2.0, "gateway": 1.5, "rgw": 3.0, "osd": 1.0, "machine": 14.0,
                     "interrupts": 1.0, "steal": 0.0, "cpu0": 7.5, "cpu1": 6.5}])
    meter.machine = True
    before = {"client": 1.5, "gateway": 1.0, "rgw": 2.25, "osd": 0.5, "machine": 11.0,
              "interrupts": 0.75, "steal": 0.0, "cpu0": 6.0, "cpu1": 5.0}
    got = restore_cpu(meter, "batch", before, 1.5)
    assert got["restore_batch_machine_cpu_s"] == 3.0
    assert got["restore_batch_other_cpu_s"] == 0.75  # 3.0 - (0.5 + 0.5 + 0.75 + 0.5)
    assert got["restore_batch_interrupts_cpu_s"] == 0.25
    assert got["restore_batch_cpu0_busy"] == 1.0 and got["restore_batch_cpu1_busy"] == 1.0
    assert "restore_batch_cpu0_cpu_s" not in got
