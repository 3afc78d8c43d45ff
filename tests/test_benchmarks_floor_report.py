"""benchmarks/floor_report.py: how the floor benchmarks print their result."""

from __future__ import annotations

import json

import pytest

from benchmarks.floor_report import print_report

DOC = {"copy_cpu_s_per_gib": 0.33, "copy_cpu_s_per_gib_rounds": [0.3, 0.4],
       "splice_gib_s": 2.5, "settings": {"mib": 16}}


def test_json_is_the_whole_document_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    print_report(DOC, True)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and json.loads(out) == DOC


def test_the_table_has_the_medians_only(capsys: pytest.CaptureFixture[str]) -> None:
    print_report(DOC, False)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines] == [["copy_cpu_s_per_gib", "0.33"],
                                                ["splice_gib_s", "2.5"]]
    assert lines[0].index("0.33") == lines[1].index("2.5")  # one column
