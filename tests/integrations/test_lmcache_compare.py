"""benchmarks/lmcache_compare.py end to end with the real LMCache on CPU, tiny: every route on a
moto server (two 32 MiB chunks a round), one untimed warm-up round and one measured round each.
No ratio is asserted (a shared 2-core machine predicts nothing); what is checked is that every
route stored and returned its chunks intact, that the figures are the measured rounds' only,
and that the report's keys are there.

LMCache's S3 connector addresses buckets virtual-hosted style, so the run adds its two host
names to /etc/hosts (``--hosts-entry``, root; .ci/run's LMCache tier runs as root) and removes
them after. Skipped where LMCache is not installed, as tests/integrations/test_lmcache.py.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

if os.environ.get("S3KV_REQUIRE_LMCACHE"):
    import lmcache  # noqa: F401  (the LMCache CI run: no LMCache is a failure)
else:
    pytest.importorskip("lmcache")

from tests.support.benchmarks import run_logged

pytestmark = pytest.mark.lmcache
ROUTES = {"plugin", "s3_gateway", "s3_direct", "plugin_dram", "plugin_direct_reads"}


def test_every_route_is_measured_warm_and_intact() -> None:
    if os.geteuid() != 0:
        pytest.fail("this test adds host names to /etc/hosts: run it as root (as .ci/run does)")
    doc, log = run_logged("lmcache_compare.py", "--server", "moto", "--hosts-entry",
                          "--tokens", "512", "--repeat", "1", "--warmup", "1",
                          "--lookup-chunks", "4", "--cpu-gib", "0.25", "--dram-cache", "128MiB",
                          timeout=420)
    assert doc["warmup"] == 1 and doc["repeat"] == 1
    assert set(doc["routes"]) == ROUTES
    # one figure a route: the warm-up round is not among them
    assert {r: len(v) for r, v in doc["retrieve_gib_s_rounds"].items()} == dict.fromkeys(
        ROUTES, 1)
    for route, m in doc["routes"].items():
        assert m["verified"] == 1.0, route
        assert m["lookup_found"] == 4.0, route
        assert m["bytes"] == 2 * 32 * 1024 * 1024, route
        for key in ("store_gib_s", "retrieve_gib_s", "lookup_ms",
                    "retrieve_cpu_s_per_gib_client", "retrieve_cpu_s_per_gib_machine"):
            assert m[key] > 0 and math.isfinite(m[key]), (route, key)
        assert m["retrieve_page_faults_per_gib"] >= 0 and m["store_page_faults_per_gib"] >= 0
    for key in ("retrieve_ratio_vs_direct", "store_ratio_vs_direct", "lookup_speedup_vs_direct",
                "retrieve_ratio_vs_direct_dram", "retrieve_ratio_vs_direct_direct_reads"):
        assert doc[key] > 0 and math.isfinite(doc[key]), key
    # the progress says which rounds were the warm-up
    assert "warm-up 1/1: s3_direct" in log and "round 1/1: s3_direct" in log
    assert "lmcdirect.s3.localtest" not in Path("/etc/hosts").read_text()
