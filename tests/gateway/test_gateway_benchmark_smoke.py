"""Smoke test of benchmarks/gateway.py: the --quick profile against moto, JSON shape only (no
ratio is asserted: moto on a shared 2-core machine predicts nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
