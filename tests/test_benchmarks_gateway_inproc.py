"""Smoke test of benchmarks/gateway_inproc.py: a tiny run, JSON shape and --help only (no figure
is asserted: CI machines are noisy; the figures are in docs/performance-log.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gateway_inproc.py"


def test_gateway_inproc_tiny_run_json(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "64KiB", "--ops", "20", "--rounds", "2",
         "--cases", "put,get,batch-put,batch-get", "--batch", "5",
         "--fill", "8MiB", "--set-bytes", "1MiB", "--shm-dir", str(tmp_path), "--calls",
         "--json"],
        capture_output=True, text=True, timeout=180, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert "us/block on the loop" in proc.stderr  # the batch cases count per block
    for op in ("put", "get", "batch_put", "batch_get"):
        tag = f"{op}_64KiB"
        for side in ("gateway", "bare"):
            assert doc[f"{side}_loop_us_per_{tag}"] > 0
            assert doc[f"{side}_process_us_per_{tag}"] > 0
            assert doc[f"{side}_faults_per_{tag}"] >= 0
            assert doc[f"{side}_slow_downs_{tag}"] >= 0
            assert len(doc["rounds"][f"{side}_{tag}_loop_us"]) == 2
            assert f"[round 2/2] {side}_{tag}:" in proc.stderr
        assert doc[f"own_us_per_{tag}"] == round(
            doc[f"gateway_loop_us_per_{tag}"] - doc[f"bare_loop_us_per_{tag}"], 1)
        # the gateway verifies, indexes and stores what the bare server drops: more calls
        assert doc[f"gateway_calls_per_{tag}"] > doc[f"bare_calls_per_{tag}"] > 0, tag
        assert doc[f"own_calls_per_{tag}"] == round(
            doc[f"gateway_calls_per_{tag}"] - doc[f"bare_calls_per_{tag}"], 1)
    assert "filled 8MiB" in proc.stderr
    assert "gateway_put_64KiB: warm-up round done (untimed)" in proc.stderr
    assert doc["settings"]["anonymous"] is False and doc["settings"]["calls"] is True
    assert doc["settings"]["cases"] == ["put", "get", "batch-put", "batch-get"]
    assert list(tmp_path.iterdir()) == []  # the store's files are removed


def test_gateway_inproc_help_lists_every_flag() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, check=True)
    for flag in ("--sizes", "--cases", "--batch", "--ops", "--rounds", "--recv-size",
                 "--set-bytes", "--capacity", "--fill", "--shm-dir", "--anonymous", "--calls",
                 "--json"):
        assert flag in proc.stdout, flag


def test_gateway_inproc_refuses_an_unknown_case() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cases", "put,delete"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert proc.returncode == 2
    assert "--cases: a comma-separated list of put, get, batch-put, batch-get" in proc.stderr
