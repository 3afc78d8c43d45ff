"""What every benchmark here runs its operations with (kept for its importers; the harness,
benchmarks/harness.py, is where it lives now)."""

from __future__ import annotations

from benchmarks.harness import run_concurrently

__all__ = ["run_concurrently"]
