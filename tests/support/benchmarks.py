"""Running a benchmark script as a user does, for the smoke tests: ``benchmarks/SCRIPT ...
--json`` in a subprocess, its one JSON line parsed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_json(script: str, *args: str, timeout: float = 240) -> dict[str, Any]:
    """benchmarks/``script`` with ``args`` and ``--json``: its one JSON line (the run must
    succeed and print nothing else on stdout)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args, "--json"],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout[-2000:]
    doc: dict[str, Any] = json.loads(lines[0])
    return doc
