"""Running a benchmark script as a user does, for the smoke tests: ``benchmarks/SCRIPT ...
--json`` in a subprocess, its JSON parsed; its ``--help``; a refused argument."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _invoke(script: str, args: tuple[str, ...], timeout: float = 60
            ) -> subprocess.CompletedProcess[str]:
    """benchmarks/``script`` with ``args``, as a user runs it (from the repo's root)."""
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          check=False)


def _run(script: str, args: tuple[str, ...], timeout: float) -> subprocess.CompletedProcess[str]:
    """benchmarks/``script`` with ``args`` and ``--json``, which must succeed."""
    proc = _invoke(script, (*args, "--json"), timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def run_json(script: str, *args: str, timeout: float = 240) -> dict[str, Any]:
    """benchmarks/``script`` with ``args`` and ``--json``: its one JSON line (the run must
    succeed and print nothing else on stdout)."""
    proc = _run(script, args, timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout[-2000:]
    doc: dict[str, Any] = json.loads(lines[0])
    return doc


def run_logged(script: str, *args: str, timeout: float = 240) -> tuple[dict[str, Any], str]:
    """benchmarks/``script`` with ``args`` and ``--json``: the JSON document it prints (on
    one line or more), and what it wrote on stderr (its progress)."""
    proc = _run(script, args, timeout)
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc, proc.stderr


def help_text(script: str) -> str:
    """benchmarks/``script`` ``--help``'s text (it must exit 0)."""
    proc = _invoke(script, ("--help",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def usage_error(script: str, *args: str) -> str:
    """benchmarks/``script`` with ``args`` refused as argparse refuses (exit 2): its stderr."""
    proc = _invoke(script, args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    return proc.stderr
