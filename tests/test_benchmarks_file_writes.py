"""Smoke test of benchmarks/file_writes.py: a tiny run, JSON shape and --help only (no figure is
asserted: CI machines are noisy; the figures are in docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "file_writes.py"


def test_file_writes_tiny_run_json(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dir", str(tmp_path), "--gib", "0.0625", "--rounds", "1",
         "--part", "4MiB", "--piece", "256KiB", "--file-bytes", "16MiB", "--json"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    for mode in ("one_file", "one_file_locked", "two_files"):
        assert doc[mode]["cpu_s_per_gib"] >= 0
        assert doc[mode]["wall_s_per_gib"] > 0
        assert len(doc[mode]["cpu_s_per_gib_rounds"]) == 1
        assert f"[round 1/1] {mode}:" in proc.stderr
    assert doc["settings"]["total"] == "64MiB"
    assert list(tmp_path.iterdir()) == []  # its files are removed


def test_file_writes_rejects_parts_that_do_not_divide() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--part", "5MiB", "--piece", "2MiB"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert proc.returncode == 2
    assert "--part must be a multiple of --piece" in proc.stderr


def test_file_writes_help_lists_every_flag() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, check=True)
    for flag in ("--dir", "--gib", "--rounds", "--part", "--piece", "--file-bytes", "--json"):
        assert flag in proc.stdout, flag
