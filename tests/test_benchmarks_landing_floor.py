"""Smoke test of benchmarks/landing_floor.py: a tiny run, JSON shape and --help only (no figure
is asserted: CI machines are noisy; the figures are in docs/performance-log.md)."""

from __future__ import annotations

from pathlib import Path

from tests.support.benchmarks import help_text, run_logged, usage_error

MODES = ("recv_reused", "recv_mapped", "crc_after", "crc_at_once")


def test_landing_floor_tiny_run_json(tmp_path: Path) -> None:
    doc, log = run_logged("landing_floor.py", "--dir", str(tmp_path), "--mib", "8",
                          "--rounds", "2", "--block", "64KiB", "--file-bytes", "2MiB",
                          "--lag", "256KiB", timeout=120)
    for mode in MODES:
        assert doc[f"{mode}_us_per_block"] > 0
        assert len(doc[f"{mode}_us_per_block_rounds"]) == 2
        assert f"[round 2/2] {mode}:" in log
    # the differences are of the medians (each rounded on its own)
    assert abs(doc["copy_extra_us_per_block"] - (doc["recv_mapped_us_per_block"]
                                                 - doc["recv_reused_us_per_block"])) <= 0.011
    assert abs(doc["crc_after_extra_us_per_block"] - (doc["crc_after_us_per_block"]
                                                      - doc["recv_mapped_us_per_block"])) <= 0.011
    assert doc["settings"] == {"block": "64KiB", "blocks": 128, "file_bytes": "2MiB",
                               "lag": "256KiB", "rounds": 2, "dir": str(tmp_path)}
    assert list(tmp_path.iterdir()) == []  # its file is removed


def test_landing_floor_rejects_a_zero_block() -> None:
    assert "must be positive" in usage_error("landing_floor.py", "--block", "0")


def test_landing_floor_help_lists_every_flag() -> None:
    text = help_text("landing_floor.py")
    for flag in ("--dir", "--block", "--mib", "--file-bytes", "--lag", "--rounds", "--json"):
        assert flag in text, flag
