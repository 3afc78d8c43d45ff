"""Smoke tests of the benchmarks that compare one object per block with s3kv: tiny sizes, JSON
keys and sane values only (no ratio is asserted: a shared 2-core machine predicts nothing).

benchmarks/kv_compare.py runs on moto; benchmarks/backend_cost.py runs on Ceph RGW with
``--split-cores`` (tier ``rgw``: the server's own request counters and the pinning are what it
checks; it starts its own RGW, as a user's run does).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_kv_compare_tiny_on_moto(tmp_path: Path) -> None:
    out = tmp_path / "kv.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "kv_compare.py"), "--server", "moto",
         "--json", str(out), "--", "--users", "1", "--duration", "2s", "--context-tokens", "512",
         "--turns", "2", "--passes", "2"],
        capture_output=True, text=True, timeout=240, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["server"].startswith("moto") and doc["split_cores"] is False
    for key in ("tokens_ratio", "p95_ratio", "tokens_ratio_replay", "p95_ratio_replay"):
        assert key in doc, key
        assert doc[key] is None or (_number(doc[key]) and doc[key] > 0), (key, doc[key])
    assert _number(doc["tokens_ratio"]) and _number(doc["tokens_ratio_replay"])
    for target in ("gateway", "s3-per-block"):
        report = doc[target]
        assert [int(p["pass"]) for p in report["passes"]] == [1, 2]
        assert report["passes"][0]["tokens_s"] > 0 and report["passes"][1]["errors"] == 0
        assert report["cpu_s"]["client"] > 0 and report["cpu_s"]["server"] > 0
    assert doc["gateway"]["cpu_s"]["gateway"] > 0
    assert doc["s3-per-block"]["cpu_s"]["gateway"] < doc["gateway"]["cpu_s"]["gateway"]
    assert "tokens_ratio" in proc.stdout


@pytest.mark.rgw
def test_backend_cost_quick_on_rgw_split_cores() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "backend_cost.py"), "--server", "rgw",
         "--quick", "--split-cores", "--json", "--volume", "16MiB"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout[-2000:]
    doc = json.loads(lines[0])
    assert doc["server"].startswith("ceph rgw")
    assert doc["split_cores"] is True and doc["server_cpus"] != doc["client_cpus"]
    for tag in ("256KiB", "2MiB", "16MiB"):
        got = doc[tag]
        for side in ("direct", "gateway"):
            for key in ("server_cpu_s", "requests", "objects", "bytes_written",
                        "free_requests", "free_server_cpu_s"):
                assert _number(got[side][key]) and got[side][key] >= 0, (tag, side, key)
            assert set(got[side]["cpu_s"]) >= {"client", "gateway", "rgw", "osd", "mon",
                                               "server"}
            # radosgw received every block byte (the gateway's adds footers and sidecars)
            assert got[side]["bytes_written"] >= 1 << 30
        # one object per block: exactly one PUT request and one object per block
        per_gib = (1 << 30) / got["block_bytes"]
        assert got["direct"]["objects"] == pytest.approx(per_gib)
        assert got["direct"]["requests"] >= per_gib
        for key in ("server_cpu_s_ratio", "requests_ratio", "objects_ratio",
                    "free_requests_ratio"):
            assert _number(doc[f"{key}_{tag}"]), (tag, key)
    # packing: far fewer objects than blocks at 256 KiB
    assert doc["objects_ratio_256KiB"] < 0.25
