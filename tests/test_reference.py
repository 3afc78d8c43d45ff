"""Reference data ships with the package (s3kv/reference/): found by name, a file path still
works, and nothing in the repository points outside it for data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from s3kv.cli import main
from s3kv.errors import ConfigError
from s3kv.reference import BUILTIN, locate

ROOT = Path(__file__).resolve().parents[1]


def test_builtin_references_by_name_and_path(tmp_path: Path) -> None:
    curve = locate("minio-qlc-8node")
    assert curve.read_text().splitlines()[0] == "clients,total_concurrency,put_gib_s,get_gib_s"
    table = locate("kv-quant-quality")
    assert table.read_text().startswith("effective_bits,compression_ratio,cosine_similarity")
    own = tmp_path / "mine.csv"
    own.write_text("clients,put_gib_s,get_gib_s\n1,1,1\n")
    assert locate(str(own)) == own  # a path still works
    with pytest.raises(ConfigError, match="kv-quant-quality, minio-qlc-8node"):
        locate("minio-qlc-9node")


def test_reference_files_are_package_data() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["s3kv"]
    assert "reference/*.csv" in patterns
    assert all((ROOT / "s3kv" / "reference" / f).is_file() for f in BUILTIN.values())


def test_sweep_refuses_an_unknown_reference_before_running(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "s3kv.cli", "sweep", "--clients", "1",
                           "--reference", "no-such-curve", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "not a built-in reference (built in: kv-quant-quality, minio-qlc-8node)" in \
        proc.stderr
    assert not (tmp_path / "o").exists()


def test_codec_bench_compares_with_the_builtin_table_by_default(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    monkeypatch.chdir(tmp_path)  # wherever it runs from
    code = main(["codec-bench", "--json", "--codec", "kvq:bits=3,dtype=float16,head_dim=128",
                 "--layers", "1", "--heads", "2", "--tokens", "256", "--repeat", "1"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    ref = {float(r.split(",")[0]): r.split(",") for r in
           locate("kv-quant-quality").read_text().splitlines()[1:]}
    kvq = [r for r in rows if r["effective_bits"]]
    assert kvq
    for r in kvq:
        assert r["ref_ratio"] == float(ref[r["effective_bits"]][1])
        assert r["ref_cosine"] == float(ref[r["effective_bits"]][2])


def test_nothing_points_outside_the_repository() -> None:
    outside = ("../" + "shared", "shared/" + "reference", "seeds" + "/")
    hits = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "dist")
                   and not d.endswith(".egg-info") and d != "__pycache__"]
        for name in files:
            if Path(name).suffix in (".md", ".py", ".toml", ".yaml", ".yml", ".txt", ".sh",
                                     ".json", ".tpl"):
                path = Path(top) / name
                text = path.read_text(errors="replace")
                hits += [f"{path.relative_to(ROOT)}: {s}" for s in outside if s in text]
    assert not hits, hits
