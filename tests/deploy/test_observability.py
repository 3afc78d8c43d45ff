"""The operator's view: the Grafana dashboard and the Prometheus alert rules ask only for what a
running gateway's /metrics exports, and the rules are valid Prometheus rules.

Every PromQL expression (dashboard panels, its template query, alert rules) is checked against a
scrape of a real ``s3kv serve`` process that has served some traffic; with ``promtool`` (Debian's
``prometheus`` package; .ci/run installs it when apt can) the rules, and the panels' expressions
as recording rules, are also checked by Prometheus's own parser.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from s3kv.client import S3KVClient
from tests.support.gateway import TOKEN, Gateway, running_gateway

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "s3kv.json"
ALERTS = ROOT / "deploy" / "prometheus" / "s3kv-alerts.yml"
NAME = re.compile(r"\bs3kv_[A-Za-z0-9_:]*")


def _dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return exprs


def _alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """Sample names a gateway's /metrics exports after it served puts, gets and lookups."""
    store = tmp_path_factory.mktemp("obs-store")
    args = ["--seal-after", "0.5", "--dram-cache", "8MiB", "--max-block-size", "16MiB",
            "--capacity", "1GiB", "--segment-size", "64MiB", "--part-size", "8MiB"]
    with running_gateway(f"file://{store}", args) as gw:
        _traffic(gw)
        with urllib.request.urlopen(gw.endpoint + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
    yield {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def _traffic(gw: Gateway) -> None:
    import asyncio

    async def go() -> None:
        async with S3KVClient(gw.endpoint, token=TOKEN) as kv:
            await kv.create_namespace("obs")
            await kv.put_many("obs", {"a": b"x" * 5000, "b": b"y" * 7000})
            assert await kv.lookup_prefix("obs", ["a", "b", "c"]) == 2
            assert await kv.get_many("obs", ["a", "c"]) == [b"x" * 5000, None]
            await kv.flush()

    asyncio.run(go())


def test_dashboard_covers_the_operators_questions() -> None:
    names = {n for e in _dashboard_exprs() for n in NAME.findall(e)}
    for wanted in ("s3kv_block_bytes_accepted_total", "s3kv_http_bytes_out_total",
                   "s3kv_requests_total", "s3kv_request_duration_seconds_bucket",
                   "s3kv_block_hits_total", "s3kv_dram_hits_total", "s3kv_open_segments",
                   "s3kv_sealed_segments", "s3kv_sealed_bytes", "s3kv_capacity_bytes",
                   "s3kv_evictions_total", "s3kv_write_amplification",
                   "s3kv_backpressure_rejections_total", "s3kv_checksum_failures_total",
                   "s3kv_backend_errors_total"):
        assert wanted in names, f"no panel shows {wanted}"
    doc = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p.get("targets") for p in doc["panels"] if p["type"] != "row")


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_expression_uses_exported_metrics(source: str, exported: set[str]) -> None:
    exprs = _dashboard_exprs() if source == "dashboard" else [r["expr"] for r in _alert_rules()]
    assert exprs
    for expr in exprs:
        names = NAME.findall(expr)
        assert names, f"{expr!r} uses no s3kv metric"
        missing = [n for n in names if n not in exported]
        assert not missing, f"{expr!r}: {missing} are not in the gateway's /metrics"


def test_alert_rules_say_what_to_do() -> None:
    rules = _alert_rules()
    assert {r["alert"] for r in rules} >= {"S3KVBackendDown", "S3KVSustained503",
                                           "S3KVChecksumFailures", "S3KVOverCapacity"}
    for r in rules:
        assert r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"] and r["annotations"]["description"]


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian package prometheus); the expressions "
                    "are still checked against a scrape above")
    return tool


def test_promtool_accepts_the_alert_rules() -> None:
    out = subprocess.run([_promtool(), "check", "rules", str(ALERTS)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_parses_every_panel_expression(tmp_path: Path) -> None:
    """Grafana's variables replaced by what they expand to, each panel query becomes a
    recording rule, which promtool parses with Prometheus's own PromQL parser."""
    rules = [{"record": f"s3kv:panel_{i}",
              "expr": e.replace("$__rate_interval", "5m").replace("$instance", ".*")}
             for i, e in enumerate(_dashboard_exprs()) if not e.startswith("label_values")]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    out = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


BYTE_UNITS = {"bytes", "decbytes", "binBps", "Bps", "decBps"}


def test_byte_series_and_counts_do_not_share_an_axis() -> None:
    """A panel drawing bytes (or bytes/s) beside a count draws them on one axis in one unit,
    where the count is a flat line at 0 next to millions of bytes. Before, "Evictions"
    (segments/s beside bytes/s) and "Blocks in the index" (blocks beside index bytes) did so,
    both in the unit "short"; now the byte series has its own unit (and axis) by override."""
    doc = json.loads(DASHBOARD.read_text())
    for panel in doc["panels"]:
        if panel["type"] != "timeseries":
            continue
        config = panel["fieldConfig"]
        default = config["defaults"].get("unit")
        by_name = {o["matcher"]["options"]: p["value"] for o in config.get("overrides", [])
                   if o["matcher"]["id"] == "byName" for p in o["properties"]
                   if p["id"] == "unit"}
        units: dict[bool, set[str | None]] = {True: set(), False: set()}
        for target in panel["targets"]:
            is_bytes = "_bytes" in target["expr"]
            unit = by_name.get(target["legendFormat"], default)
            units[is_bytes].add(unit)
            if is_bytes and "/ 1073741824" not in target["expr"]:
                assert unit in BYTE_UNITS, (panel["title"], target["legendFormat"], unit)
        assert not (units[True] & units[False]), (panel["title"], units)
