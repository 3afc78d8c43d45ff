"""Smoke test of benchmarks/file_writes.py: a tiny run, JSON shape and --help only (no figure is
asserted: CI machines are noisy; the figures are in docs/performance-log.md)."""

from __future__ import annotations

from pathlib import Path

from tests.support.benchmarks import help_text, run_logged, usage_error


def test_file_writes_tiny_run_json(tmp_path: Path) -> None:
    doc, log = run_logged("file_writes.py", "--dir", str(tmp_path), "--gib", "0.0625",
                          "--rounds", "1", "--part", "4MiB", "--piece", "256KiB",
                          "--file-bytes", "16MiB", timeout=120)
    for mode in ("one_file", "one_file_locked", "two_files"):
        assert doc[mode]["cpu_s_per_gib"] >= 0
        assert doc[mode]["wall_s_per_gib"] > 0
        assert len(doc[mode]["cpu_s_per_gib_rounds"]) == 1
        assert f"[round 1/1] {mode}:" in log
    assert doc["settings"]["total"] == "64MiB"
    assert list(tmp_path.iterdir()) == []  # its files are removed


def test_file_writes_rejects_parts_that_do_not_divide() -> None:
    assert "--part must be a multiple of --piece" in usage_error(
        "file_writes.py", "--part", "5MiB", "--piece", "2MiB")


def test_file_writes_help_lists_every_flag() -> None:
    text = help_text("file_writes.py")
    for flag in ("--dir", "--gib", "--rounds", "--part", "--piece", "--file-bytes", "--json"):
        assert flag in text, flag
