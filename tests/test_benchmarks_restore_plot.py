"""benchmarks/restore_plot.py: the restore against the block's size, drawn from a gateway.py
report (a made-up one here: the figures come from a benchmark run, never from CI)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from benchmarks.restore_plot import main, points


def _report() -> dict[str, object]:
    doc: dict[str, object] = {"server": "ceph rgw", "model": "qwen2.5-7b", "split_cores": True,
                              "restore_block_tokens": [16, 4, 64]}
    for t, ratio in ((16, 1.5), (4, 2.7), (64, 1.1)):
        doc.update({f"restore_block_bytes_{t}tok": 56 * 1024 * t, f"restore_ratio_{t}tok": ratio,
                    f"restore_batch_server_cpu_s_{t}tok": 0.75,
                    f"restore_per_block_server_cpu_s_{t}tok": 0.75 * ratio})
    return doc


def test_points_are_ordered_by_block_size() -> None:
    pts = points(_report())
    assert [p["tokens"] for p in pts] == [4, 16, 64]
    assert [p["kib"] for p in pts] == [224, 896, 3584]
    assert [p["ratio"] for p in pts] == [2.7, 1.5, 1.1]


def test_writes_the_png(tmp_path: Path) -> None:
    report, png = tmp_path / "r.json", tmp_path / "r.png"
    report.write_text(json.dumps(_report()))
    assert main([str(report), str(png)]) == 0
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (1200, 500)


def test_a_report_without_sizes_is_refused(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    report, png = tmp_path / "r.json", tmp_path / "r.png"
    report.write_text(json.dumps({"restore_ratio": 1.5}))
    assert main([str(report), str(png)]) == 1
    assert "--restore-block-tokens" in capsys.readouterr().err
    assert not png.exists()
