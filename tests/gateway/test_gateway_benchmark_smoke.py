"""Smoke test of benchmarks/gateway.py: the --quick profile against moto, JSON shape only (no
ratio is asserted: moto on a shared 2-core machine predicts nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"put_ratio_256KiB_c1", "put_ratio_256KiB_c8", "get_ratio_2MiB_c1", "get_ratio_2MiB_c8",
        "restore_ratio"}


def test_gateway_benchmark_quick_json() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gateway.py"), "--server", "moto", "--quick",
         "--json", "--repeats", "2"],
        capture_output=True, text=True, timeout=240, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout[-2000:]
    doc = json.loads(lines[0])
    assert set(doc) >= KEYS, sorted(doc)
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
    assert set(cpu) == {"client", "gateway", "server"}
    assert cpu["gateway"] > 0 and doc["direct_put_cpu_s_per_GiB_256KiB_c8"]["gateway"] == 0


def test_gateway_floor_benchmark_quick_json() -> None:
    """benchmarks/gateway_floor.py: direct, bare aiohttp sink and gateway PUTs in one run; each
    ratio is the median of its repeats, and each side's CPU per PUT is reported."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gateway_floor.py"), "--server", "moto",
         "--quick", "--json", "--repeats", "2", "--blocks", "24", "--concurrency", "1,4"],
        capture_output=True, text=True, timeout=240, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout[-2000:]
    doc = json.loads(lines[0])
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
