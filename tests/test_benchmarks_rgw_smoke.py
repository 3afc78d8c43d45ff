"""Smoke tests of the benchmarks that compare one object per block with s3kv: tiny sizes, JSON
keys and sane values only (no ratio is asserted: a shared 2-core machine predicts nothing).

benchmarks/kv_compare.py and benchmarks/backend_cost.py (with ``--split-cores``) run on moto;
the ``rgw`` tier checks the RGW counters the cost figures come from, on the session's RGW.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from benchmarks.harness import BenchServer, CPUMeter, bucket_objects_on, server_counters
from tests.conftest import make_s3_client
from tests.support.benchmarks import run_json
from tests.support.rgw import RGWCluster

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
        # the machine's busy time holds the ranks (the client), the gateway, the server and
        # what ran outside them, each once (rounded to 0.01 s; psutil counts 10 ms ticks)
        cpu = report["cpu_s"]
        named = cpu["client"] + cpu["gateway"] + cpu["server"]
        assert 0 <= cpu["other"] <= cpu["machine"] - named + 0.02 * (6 + psutil.cpu_count())
    assert doc["gateway"]["cpu_s"]["gateway"] > 0
    assert doc["s3-per-block"]["cpu_s"]["gateway"] < doc["gateway"]["cpu_s"]["gateway"]
    assert "tokens_ratio" in proc.stdout


def test_backend_cost_quick_on_moto_split_cores() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "backend_cost.py"), "--server", "moto",
         "--quick", "--split-cores", "--json", "--volume", "4MiB"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout[-2000:]
    doc = json.loads(lines[0])
    assert doc["server"].startswith("moto")
    assert doc["split_cores"] is True and doc["server_cpus"] != doc["client_cpus"]
    for tag in ("256KiB", "2MiB", "16MiB"):
        got = doc[tag]
        for side in ("direct", "gateway"):
            for key in ("server_cpu_s", "objects", "free_requests", "free_server_cpu_s"):
                assert _number(got[side][key]) and got[side][key] >= 0, (tag, side, key)
            # moto keeps no request counters: those figures are null, not guessed
            assert got[side]["requests"] is None and got[side]["bytes_written"] is None
            assert set(got[side]["cpu_s"]) == {
                "client", "gateway", "server", "machine", "interrupts", "steal", "other",
                *(f"cpu{i}" for i in range(psutil.cpu_count()))}
        # one object per block: exactly one object per block written
        assert got["direct"]["objects"] == pytest.approx((1 << 30) / got["block_bytes"])
        assert got["requests_ratio"] is None
        for key in ("objects_ratio", "free_requests_ratio"):
            assert _number(doc[f"{key}_{tag}"]), (tag, key)
        cpu_ratio = doc[f"server_cpu_s_ratio_{tag}"]  # null only if direct's CPU read 0 ticks
        assert cpu_ratio is None or _number(cpu_ratio)
    # packing: far fewer objects than blocks at 256 KiB
    assert doc["objects_ratio_256KiB"] < 0.25


@pytest.mark.rgw
def test_rgw_counters_count_what_the_server_saw(rgw_server: RGWCluster) -> None:
    """The backend-cost figures' source on RGW: radosgw's request and byte counters and the
    bucket index's object count, read the way the harness reads them."""
    server = BenchServer(rgw_server.endpoint, "rgw", rgw_server.access_key,
                         rgw_server.secret_key, data_dir=str(rgw_server.dir),
                         pids=tuple(rgw_server.pids().values()))
    s3 = make_s3_client(rgw_server.endpoint)
    bucket = f"count-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    before = server_counters(server)
    assert before is not None
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"x" * (1000 + i))
    after = server_counters(server)
    assert after is not None
    assert after["put"] - before["put"] == 5
    assert after["put_b"] - before["put_b"] == sum(1000 + i for i in range(5))
    assert after["req"] - before["req"] >= 5
    assert bucket_objects_on(server, bucket) == (5, sum(1000 + i for i in range(5)))
    meter = CPUMeter.for_run(server)
    assert set(meter.procs) == {"client", "mon", "osd", "rgw"}
    assert meter.server == ("mon", "osd", "rgw")


def test_rgw_ranged_reads_every_case_on_moto() -> None:
    doc = run_json("rgw_ranged.py", "--server", "moto", "--object-size", "16MiB",
                   "--repeats", "1")
    assert doc["server"].startswith("moto") and doc["multipart"] is True
    assert doc["object"] == "16MiB" and doc["split_cores"] is False
    assert [(c["streams"], c["range"]) for c in doc["cases"]] == [
        (1, "64MiB"), (4, "64MiB"), (8, "16MiB"), (8, "1MiB")]
    for case in doc["cases"]:
        assert _number(case["MiB_s"]) and case["MiB_s"] > 0
        assert _number(case["server_cpu_s_per_GiB"]) and case["server_cpu_s_per_GiB"] >= 0
