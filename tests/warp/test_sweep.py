"""``s3kv sweep --clients 1..3`` against the real S3 server: every output file, a valid PNG."""

from __future__ import annotations

import csv
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from s3kv.reference import locate
from warp.records import read_records
from warp.sweep.plot import DPI, HEIGHT_IN, WIDTH_IN

REFERENCE = locate("minio-qlc-8node")  # shipped with the package


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_sweep_clients_1_to_3(s3_server: Any, s3_client: Any, bucket: str,
                              tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    reference = tmp_path / "ref.csv"
    reference.write_text("clients,total_concurrency,put_gib_s,get_gib_s\n1,32,40,39\n"
                         "2,64,64,77\n3,96,84,114\n")
    proc = subprocess.run(
        [sys.executable, "-m", "s3kv.cli", "sweep", "--clients", "1..3",
         "--endpoint", s3_server.endpoint, "--bucket", bucket, "--obj-size", "64KiB",
         "--concurrent", "2", "--duration", "2.5", "--trim", "0.25", "--objects", "8",
         "--out", str(out), "--reference", str(reference), "--json"],
        capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for op in ("put", "get"):
        for n in (1, 2, 3):
            records = read_records(out / f"{op}-{n:02d}c.csv.zst")
            assert records and {r.op for r in records} == {op.upper()}
            assert {r.client_id for r in records} == {f"c{i}" for i in range(1, n + 1)}
    doc = json.loads(proc.stdout)
    assert doc == json.loads((out / "summary.json").read_text())
    assert [row["clients"] for row in doc["table"]] == [1, 2, 3]
    assert [row["total_concurrency"] for row in doc["table"]] == [2, 4, 6]
    assert all(row["put_gib_s"] and row["get_gib_s"] for row in doc["table"])
    assert doc["scaling"]["put"]["efficiency"][0] == 1.0
    assert "knee" in doc["rules"] and "saturation" in doc["rules"]
    with open(out / "summary.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["clients"] for r in rows] == ["1", "2", "3"]
    assert {"put_gib_s", "get_gib_s", "put_fastest_gib_s", "get_ttfb_p99_ms",
            "put_errors"} <= set(rows[0])
    assert _png_size(out / "sweep.png") == (int(WIDTH_IN * DPI), int(HEIGHT_IN * DPI))
    # the PUT phases' objects and the shared GET set are removed
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def test_reference_file_shape() -> None:
    from warp.sweep.summary import knee, read_reference, saturation

    ref = read_reference(REFERENCE)
    put = [(n, p) for n, p, _ in ref]
    get = [(n, g) for n, _, g in ref]
    assert (knee(put), saturation(put)) == (3, 7)
    assert (knee(get), saturation(get)) == (7, None)


def test_scaling_panel_is_relative_to_one_client_when_the_sweep_starts_above_one(
        tmp_path: Path, monkeypatch: Any) -> None:
    """`--clients 2,4`: perfect scaling is T(4) = 2 T(2). The panel "T(n) / T(1)" beside the
    line y = n must show 2 and 4 (T(1) taken as T(2) / 2, as the efficiency column does), not
    1 and 2, which reads as 50 % efficiency where the table says 1.00."""
    import warp.sweep.plot as plot_module
    from warp.sweep.summary import PhaseResult, efficiency

    axes: list[Any] = []
    subplots = plot_module.plt.subplots

    def spy(*args: Any, **kw: Any) -> Any:
        fig, pair = subplots(*args, **kw)
        axes.extend(pair)
        return fig, pair

    monkeypatch.setattr(plot_module.plt, "subplots", spy)
    mib = 2.0**20
    phases = [PhaseResult("GET", n, 4 * n, f"get-{n:02d}c.csv.zst", 100, 0, 0, 100 * n * mib,
                          100 * n * mib, 100 * n * mib, 100 * n * mib, None, None, None, None, 3)
              for n in (2, 4)]
    plot_module.plot(phases, tmp_path / "sweep.png")
    [measured] = [line for line in axes[1].get_lines() if line.get_label() == "GET measured"]
    assert list(measured.get_ydata()) == [2.0, 4.0] == list(measured.get_xdata())
    assert efficiency([(2, 200 * mib), (4, 400 * mib)]) == [1.0, 1.0]
