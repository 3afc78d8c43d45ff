"""Smoke test of benchmarks/packing.py: a tiny profile against moto, JSON shape only.

No ratio is asserted (CI machines are noisy; the targets are for benchmark runs, see
docs/performance-log.md). This checks that the benchmark runs end to end, starts and stops its own
server, and prints exactly one JSON object with the documented keys and sane numbers.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = ("put_ratio_256KiB", "put_ratio_2MiB", "chain_read_ratio", "index_bytes_per_entry",
            "write_amplification")


def test_packing_benchmark_quick_json_on_moto() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "packing.py"), "--server", "moto", "--quick",
         "--json", "--no-progress"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout[-3000:]
    report = json.loads(lines[0])
    assert isinstance(report, dict)
    for key in (*REQUIRED, "get_ratio_256KiB", "get_ratio_2MiB"):
        value = report[key]
        assert isinstance(value, (int, float)) and not isinstance(value, bool), key
        assert math.isfinite(value) and value > 0, (key, value)
    assert report["write_amplification"] >= 1.0  # footers and sidecars are never free
    assert report["server"].startswith("moto")
    for comp in report["comparisons"].values():
        assert comp["store_mib_s"] > 0 and comp["direct_mib_s"] > 0


def test_packing_help_lists_every_flag() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "packing.py"), "--help"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, check=True)
    for flag in ("--server", "--endpoint", "--json", "--quick", "--volume", "--segment-size",
                 "--part-size", "--chains", "--chain-length", "--index-entries", "--concurrency",
                 "--repeats", "--bucket", "--seed", "--no-progress", "--node-dir", "--data-dir"):
        assert flag in proc.stdout, flag
