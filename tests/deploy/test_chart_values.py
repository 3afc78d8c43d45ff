"""The Helm chart's values: values.schema.json rejects bad values and covers every value, the
cross-field rules fail with a message, and the config section is the gateway's settings table
(the ConfigMap holds only settings `s3kv serve` reads, parsed as it parses them)."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from s3kv.config import Settings
from s3kv.gateway.server import check_settings
from tests.deploy.chart import (
    CASES,
    CHART,
    CI_FILES,
    by_kind,
    load_values,
    render,
)

# ---- values schema ---------------------------------------------------------------------------

BAD_VALUES = [
    ({"mode": "bogus"}, "mode"),
    ({"replicaCount": -1}, "replicaCount"),
    ({"replicaCount": "three"}, "replicaCount"),
    ({"config": {"unknown_setting": 1}}, "unknown_setting"),
    ({"config": {"secret_key": "in-a-configmap"}}, "secret_key"),
    ({"config": {"segment_size": "lots"}}, "segment_size"),
    ({"config": {"log_format": "xml"}}, "log_format"),
    ({"config": {"max_open_segments": 1.5}}, "max_open_segments"),
    ({"service": {"port": 70000}}, "port"),
    ({"sweep": {"output": {"type": "s3"}}}, "type"),
    ({"tpyo": True}, "tpyo"),
]


@pytest.mark.parametrize(("bad", "key"), BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_values_schema_rejects_bad_values(bad: dict[str, Any], key: str) -> None:
    with pytest.raises(helm.HelmError) as err:
        render(bad)
    assert key in str(err.value)
    report = helm.lint(str(CHART), bad)
    assert report["errors"] or any(m["severity"] == 3 for m in report["messages"])


@pytest.mark.parametrize(("bad", "message"), [
    ({"mode": "daemonset", "autoscaling": {"enabled": True}}, "needs mode: deployment"),
    ({"sweep": {"enabled": True}}, "needs sweep.endpoint"),
    ({"terminationGracePeriodSeconds": 30, "preStop": {"sleepSeconds": 10}},
     "seal open segments"),
])
def test_cross_field_rules_fail_with_a_message(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(bad)


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return schema


def _leaves(value: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in _leaves(v, (*path, k))]
    return [path]


def test_values_schema_covers_every_value() -> None:
    """Every key of values.yaml (and of the ci files) is described by the schema."""
    schema = _schema()
    files = [CHART / "values.yaml", *CI_FILES]
    for file in files:
        for leaf in _leaves(yaml.safe_load(file.read_text())):
            node = schema
            for key in leaf:
                props = node.get("properties")
                if props is None:  # a free-form Kubernetes object (resources, affinity, ...)
                    assert node.get("type") in ("object", "array"), (file, leaf)
                    break
                assert key in props, f"{file.name}: {'.'.join(leaf)} is not in the schema"
                node = props[key]
            assert node.get("description"), f"{'.'.join(leaf)} has no description"
    # no object in the schema accepts unknown keys, except the free-form Kubernetes ones
    def walk(node: dict[str, Any], where: str) -> None:
        if "properties" in node:
            assert node.get("additionalProperties") is False, where
            for k, v in node["properties"].items():
                walk(v, f"{where}.{k}")
    walk(schema, "values")


# ---- one source of truth: the settings table -------------------------------------------------

def test_values_schema_config_matches_the_settings_table() -> None:
    spec = importlib.util.spec_from_file_location("sync_settings", CHART / "sync_settings.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, (
        "values.schema.json's config section is out of date with s3kv/config.py: "
        "run python charts/s3kv/sync_settings.py")
    config_props = set(_schema()["properties"]["config"]["properties"])
    assert config_props == {f.name for f in Settings.field_specs()} - module.CHART_MANAGED


@pytest.mark.parametrize("values_file", CASES)
def test_configmap_keys_are_settings_the_gateway_reads(values_file: Path | None) -> None:
    docs = render(load_values(values_file))
    data = next(d for d in by_kind(docs, "ConfigMap")  # the settings, not the dashboard
                if d["__template__"].endswith("/configmap.yaml"))["data"]
    assert data, "the ConfigMap is empty"
    assert set(data) <= Settings.env_names(), set(data) - Settings.env_names()
    # and the gateway accepts them: the same parsing and validation `s3kv serve` does
    settings = Settings.load(env=data)
    check_settings(settings)
    assert settings.listen == "0.0.0.0:9470"
    values = load_values(values_file) or {}
    expected = copy.deepcopy(yaml.safe_load((CHART / "values.yaml").read_text())["config"])
    expected.update(values.get("config", {}))
    for name, raw in expected.items():
        assert getattr(settings, name) == Settings.parse_value(name, raw), name
    # secrets never land in the ConfigMap
    assert "S3KV_SECRET_KEY" not in data and "S3KV_ACCESS_KEY" not in data



def test_grace_period_rule_covers_the_gateways_drain() -> None:
    """After SIGTERM the gateway gives requests in flight SHUTDOWN_GRACE, aiohttp then waits
    SHUTDOWN_TIMEOUT, and only then seals, where one upload request may take backend_timeout.
    Before, the chart took any grace period of preStop.sleepSeconds + 30 s, 20 s short of that
    with the default backend_timeout (30 s): a pod rendered with 40 s could be SIGKILLed while
    it sealed, losing acknowledged write-back blocks. Now it refuses less than the sum."""
    from s3kv.gateway.server import SHUTDOWN_GRACE, SHUTDOWN_TIMEOUT

    drain = math.ceil(SHUTDOWN_GRACE + SHUTDOWN_TIMEOUT)
    for timeout in (Settings().backend_timeout, 120.0, 30.5):
        values: dict[str, Any] = {"preStop": {"sleepSeconds": 10},
                                  "config": {"backend_timeout": timeout}}
        needed = 10 + drain + math.ceil(timeout)
        render({**values, "terminationGracePeriodSeconds": needed})
        with pytest.raises(helm.HelmError, match=f"at least {needed}"):
            render({**values, "terminationGracePeriodSeconds": needed - 1})
    # the default values and every ci file fit
    for values_file in CI_FILES:
        render(load_values(values_file))
    render(None)


@pytest.mark.parametrize("config", [
    {},
    {"dram_cache": "4GiB"},
    {"segment_size": 268435456, "max_open_segments": 4, "dram_cache": "10GB"},
    {"segment_size": "128MiB", "max_request_memory": "1GiB", "max_read_memory": "2GiB"},
], ids=["defaults", "dram-4GiB", "bytes-and-GB", "memory-settings"])
def test_memory_limit_must_hold_the_settings_bound(config: dict[str, Any]) -> None:
    """The gateway bounds its memory by its settings (docs/operations.md, "Gateway memory"):
    max_open_segments x segment_size + max_request_memory + max_read_memory + dram_cache +
    ~256 MiB for the process, before the index. Before, the chart rendered any limit: the
    default 2Gi with `config.dram_cache: 4GiB` (as ci/everything-on-values.yaml had it) is an
    OOM kill once the DRAM tier fills, losing the open segments' write-back blocks. Now a limit
    under the sum fails, naming it; the sum is worked out here from the settings the ConfigMap
    gives the gateway (Settings.load), so the chart's defaults are s3kv/config.py's."""
    data = next(d for d in by_kind(render({"config": config, "resources": {"limits": None}}),
                                     "ConfigMap")
                if d["__template__"].endswith("/configmap.yaml"))["data"]
    s = Settings.load(env=data)
    needed = (s.max_open_segments * s.segment_size + s.max_request_memory + s.max_read_memory
              + s.dram_cache + 256 * 2**20)
    mib = -(-needed // 2**20)
    render({"config": config, "resources": {"limits": {"memory": needed}}})
    render({"config": config, "resources": {"limits": {"memory": f"{mib}Mi"}}})
    with pytest.raises(helm.HelmError, match=f"below the gateway's own memory bound.*= {mib}Mi"):
        render({"config": config, "resources": {"limits": {"memory": f"{mib - 1}Mi"}}})
    with pytest.raises(helm.HelmError, match="below the gateway's own memory bound"):
        render({"config": config, "resources": {"limits": {"memory": needed - 1}}})
    # no limit: nothing to check
    render({"config": config, "resources": {"limits": None}})
    # a setting unset with null (the ConfigMap leaves it out) counts at the gateway's default
    with pytest.raises(helm.HelmError, match=r"2 x 256Mi\) .* = 1792Mi"):
        render({"config": {"segment_size": None}, "resources": {"limits": {"memory": "1791Mi"}}})
