"""The Grafana dashboard over a store served by several gateways: panels of what the store holds
show the store's figures, not those figures times the number of replicas.

Two real ``s3kv serve`` replicas share one ``file://`` store; after one writes and seals, both
follow the store (replica sync) and their /metrics are scraped. The scrapes become promtool's
input series (one ``instance`` per gateway, as Prometheus labels them) and each panel query is
evaluated by ``promtool test rules`` (Prometheus's own engine), Grafana's variables replaced by
what "all gateways" expands to.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from s3kv.client import S3KVClient
from tests.support.gateway import TOKEN, metric, running_gateways

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "s3kv.json"
BLOCKS = 12


def _target(title: str, legend: str) -> str:
    doc = json.loads(DASHBOARD.read_text())
    panel = next(p for p in doc["panels"] if p.get("title") == title)
    expr: str = next(t["expr"] for t in panel["targets"] if t["legendFormat"] == legend)
    return expr.replace("$__rate_interval", "5m").replace("$instance", ".*")


def test_store_wide_panels_count_the_store_once(tmp_path: Path) -> None:
    """Before, "Blocks in the index" and the sealed line of "Segments: open and sealed" summed
    s3kv_index_entries and s3kv_sealed_segments over the gateways: with two replicas of a store
    of 12 blocks in 1 sealed segment they showed 24 blocks and 2 segments. Now 12 and 1."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    store = tmp_path / "store"
    store.mkdir()
    args = ["--seal-after", "0.5", "--segment-size", "8MiB", "--part-size", "8MiB",
            "--max-block-size", "1MiB", "--sync-interval", "0.5"]
    with running_gateways(f"file://{store}", [args, args]) as gws:
        async def write() -> None:
            async with S3KVClient(gws[0].endpoint, token=TOKEN) as kv:
                await kv.create_namespace("replicas")
                await kv.put_many("replicas", {f"k{i}": bytes([i]) * 3000
                                               for i in range(BLOCKS)})
                await kv.flush()

        asyncio.run(write())
        deadline = time.monotonic() + 30
        while any(metric(g.endpoint, "s3kv_index_entries") != BLOCKS for g in gws):
            assert time.monotonic() < deadline, "the replica did not follow the store"
            time.sleep(0.2)
        names = ("s3kv_index_entries", "s3kv_sealed_segments", "s3kv_open_segments")
        scraped = {g.endpoint: {n: metric(g.endpoint, n) for n in names} for g in gws}
    series = [{"series": f'{name}{{instance="{ep.split("//")[1]}",job="s3kv"}}',
               "values": f"{value:g}x10"}
              for ep, values in scraped.items() for name, value in values.items()]
    one = next(iter(scraped.values()))
    assert one["s3kv_index_entries"] == BLOCKS and one["s3kv_sealed_segments"] == 1
    checks = [
        (_target("Blocks in the index", "blocks"), BLOCKS),
        (_target("Segments: open and sealed", "sealed"), 1),
        # each gateway fills its own open segments: those do add up
        (_target("Segments: open and sealed", "open (in memory)"),
         sum(v["s3kv_open_segments"] for v in scraped.values())),
    ]
    test = {"interval": "1m", "input_series": series,
            "promql_expr_test": [{"expr": expr, "eval_time": "5m",
                                  "exp_samples": [{"labels": "{}", "value": value}]}
                                 for expr, value in checks]}
    path = tmp_path / "panels-test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m",
                                    "tests": [test]}))
    out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
