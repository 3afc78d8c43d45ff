"""Smoke test of benchmarks/relay_floor.py: a tiny run, JSON shape and --help only (no figure
is asserted: CI machines are noisy; the figures are in docs/performance-log.md)."""

from __future__ import annotations

from tests.support.benchmarks import help_text, run_logged, usage_error

MODES = ("copy", "splice")


def test_relay_floor_tiny_run_json() -> None:
    doc, log = run_logged("relay_floor.py", "--mib", "16", "--rounds", "2", "--chunk", "256KiB",
                          timeout=120)
    for mode in MODES:
        assert doc[f"{mode}_cpu_s_per_gib"] > 0 and doc[f"{mode}_gib_s"] > 0
        assert len(doc[f"{mode}_cpu_s_per_gib_rounds"]) == 2
        assert f"[round 2/2] {mode}:" in log
    assert doc["settings"] == {"mib": 16, "chunk": "256KiB", "rounds": 2}


def test_relay_floor_rejects_a_zero_chunk() -> None:
    assert "must be positive" in usage_error("relay_floor.py", "--chunk", "0")


def test_relay_floor_help_lists_every_flag() -> None:
    text = help_text("relay_floor.py")
    for flag in ("--mib", "--chunk", "--rounds", "--json"):
        assert flag in text, flag
