"""The alert rules (deploy/prometheus/s3kv-alerts.yml) evaluated by Prometheus itself:
``promtool test rules`` on synthetic series, one scenario at a time, each naming the alerts that
must fire at its evaluation time; every other alert of the file must stay silent then.

The rules are tested as written, except that their annotations are left out of the copy
promtool evaluates: promtool compares annotations as exactly as labels, and what is tested here
is when each alert fires (expression, ``for``, labels), not its wording
(test_observability.py checks that every alert has a summary and a description).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "s3kv-alerts.yml"

GW = 'instance="gw1:9470",job="s3kv"'
#: the labels of an alert whose expression aggregates `by (instance)`
BY_INSTANCE = {"instance": "gw1:9470"}
#: the labels of an alert whose expression keeps the series' labels
SERIES = {"instance": "gw1:9470", "job": "s3kv"}

#: a gateway doing well: backend up, 0.5 % of requests 503, a store with no budget
HEALTHY = [
    {"series": f"s3kv_backend_healthy{{{GW}}}", "values": "1x40"},
    {"series": f's3kv_requests_total{{{GW},op="PutObject",status="200"}}', "values": "0+199x40"},
    {"series": f's3kv_requests_total{{{GW},op="PutObject",status="503"}}', "values": "0+1x40"},
    {"series": f"s3kv_checksum_failures_total{{{GW}}}", "values": "0x40"},
    {"series": f"s3kv_blocks_lost_total{{{GW}}}", "values": "0x40"},
    {"series": f"s3kv_segments_failed_total{{{GW}}}", "values": "0x40"},
]


def _with(*series: dict[str, str]) -> list[dict[str, str]]:
    """HEALTHY with the given series in place of those of the same name and labels."""
    names = {s["series"] for s in series}
    return [s for s in HEALTHY if s["series"] not in names] + list(series)


def _capacity(sealed: str, open_bytes: str, budget: str) -> list[dict[str, str]]:
    return [{"series": f"s3kv_sealed_bytes{{{GW}}}", "values": sealed},
            {"series": f"s3kv_open_segment_bytes{{{GW}}}", "values": open_bytes},
            {"series": f"s3kv_capacity_bytes{{{GW}}}", "values": budget}]


TIB = 2**40
SEGMENT = 256 * 2**20

#: (id, input series, evaluation time, {alert: labels of each alert expected to fire})
SCENARIOS: list[tuple[str, list[dict[str, str]], str, dict[str, list[dict[str, str]]]]] = [
    ("healthy", HEALTHY, "30m", {}),
    # a full cache, evicting as designed: 100 TiB budget, one segment of room kept for the
    # segment about to open, one open segment in memory (eviction.py: it deletes only while
    # the stored bytes are over the budget): it sits at 99.9998 % for good, and no alert fires
    ("full cache evicting", HEALTHY + _capacity(f"{100 * TIB - 2 * SEGMENT}x40",
                                                 f"{SEGMENT // 2}x40", f"{100 * TIB}x40"),
     "30m", {}),
    ("over capacity 20 minutes", HEALTHY + _capacity(f"{110 * TIB}x40", f"{SEGMENT}x40",
                                                      f"{100 * TIB}x40"),
     "20m", {"S3KVOverCapacity": [SERIES]}),
    ("over capacity 10 minutes", HEALTHY + _capacity(f"{99 * TIB}x20 {110 * TIB}x20",
                                                      f"{SEGMENT}x40", f"{100 * TIB}x40"),
     "30m", {}),
    ("no capacity budget", HEALTHY + _capacity(f"{500 * TIB}x40", f"{SEGMENT}x40", "0x40"),
     "30m", {}),
    ("backend down 3 minutes", _with({"series": f"s3kv_backend_healthy{{{GW}}}",
                                      "values": "1x26 0x13"}), "30m",
     {"S3KVBackendDown": [BY_INSTANCE]}),
    ("backend down 1 minute", _with({"series": f"s3kv_backend_healthy{{{GW}}}",
                                     "values": "1x28 0 1x11"}), "30m", {}),
    ("10 % of requests 503", _with(
        {"series": f's3kv_requests_total{{{GW},op="PutObject",status="200"}}',
         "values": "0+180x40"},
        {"series": f's3kv_requests_total{{{GW},op="PutObject",status="503"}}',
         "values": "0+20x40"}), "20m", {"S3KVSustained503": [BY_INSTANCE]}),
    ("checksum failure", _with({"series": f"s3kv_checksum_failures_total{{{GW}}}",
                                "values": "0x25 1x15"}), "30m",
     {"S3KVChecksumFailures": [SERIES]}),
    ("write-back blocks lost", _with({"series": f"s3kv_blocks_lost_total{{{GW}}}",
                                      "values": "0x25 3x15"}), "30m",
     {"S3KVWriteBackBlocksLost": [SERIES]}),
    ("segment upload failed", _with({"series": f"s3kv_segments_failed_total{{{GW}}}",
                                     "values": "0x25 1x15"}), "30m",
     {"S3KVSegmentUploadsFailing": [SERIES]}),
    # the same failures long enough ago are forgotten by each alert's window
    ("old failures", _with({"series": f"s3kv_checksum_failures_total{{{GW}}}",
                            "values": "0x5 1x35"},
                           {"series": f"s3kv_segments_failed_total{{{GW}}}",
                            "values": "0x5 1x35"}), "35m", {}),
]


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    return tool


def _rules_without_annotations(tmp_path: Path) -> tuple[Path, list[str]]:
    doc: dict[str, Any] = yaml.safe_load(ALERTS.read_text())
    names = []
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
            names.append(rule["alert"])
    path = tmp_path / "s3kv-alerts.yml"
    path.write_text(yaml.safe_dump(doc))
    return path, names


@pytest.mark.parametrize(("series", "at", "firing"),
                         [pytest.param(s, t, f, id=i) for i, s, t, f in SCENARIOS])
def test_alerts_fire_when_they_should_and_only_then(
        series: list[dict[str, str]], at: str, firing: dict[str, list[dict[str, str]]],
        tmp_path: Path) -> None:
    rules, names = _rules_without_annotations(tmp_path)
    assert set(firing) <= set(names), set(firing) - set(names)
    test = {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": at, "alertname": name,
             "exp_alerts": [{"exp_labels": {"severity": _severity(name), **labels}}
                            for labels in firing.get(name, [])]}
            for name in names],
    }
    path = tmp_path / "test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m",
                                    "tests": [test]}))
    out = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def _severity(name: str) -> str:
    doc = yaml.safe_load(ALERTS.read_text())
    return next(r["labels"]["severity"] for g in doc["groups"] for r in g["rules"]
                if r["alert"] == name)
