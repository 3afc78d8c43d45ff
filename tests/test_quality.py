"""Static checks as tests: ruff and mypy --strict over the packages (the project's style rules)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    assert found, f"{name} is not installed; install the test extra: pip install -e '.[test]'"
    return found


def test_ruff_clean() -> None:
    proc = subprocess.run([_tool("ruff"), "check", "s3kv", "warp", "tests", "benchmarks"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict() -> None:
    proc = subprocess.run([_tool("mypy"), "--strict", "-p", "s3kv", "-p", "warp"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_import_warp_is_ours() -> None:
    """`warp` is also NVIDIA's warp-lang; the import must resolve to this project's package."""
    import warp

    assert Path(warp.__file__).resolve().parent == ROOT / "warp"


def test_every_module_under_400_lines() -> None:
    """One job per module: every module of the packages, the benchmarks and the tests stays
    under 400 lines."""
    long = {str(p.relative_to(ROOT)): n for pkg in ("s3kv", "warp", "benchmarks", "tests")
            for p in sorted((ROOT / pkg).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) >= 400}
    assert not long, f"split these by job: {long}"
