"""The Helm chart (charts/s3kv): lint, render, Kubernetes schema validation, values schema.

No `helm` binary can be installed here. `helm-python-sdk` bundles Helm's own Go SDK (v4) as a
shared library, so `helm lint` and `helm template` run in-process with Helm's real template
engine, values coalescing and values.schema.json validation. `kubernetes-validate` ships the
Kubernetes OpenAPI schemas (strict variants reject unknown fields) and works offline. It has no
schemas for CRDs, so the ServiceMonitor (Prometheus Operator) is checked against a structural
subset of its CRD written out below, not the CRD itself.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate as kv
import pytest
import yaml

from s3kv.config import Settings
from s3kv.gateway.server import check_settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "s3kv"
CI_FILES = sorted((CHART / "ci").glob("*.yaml"))
#: the newest Kubernetes the validator ships, and the oldest the chart declares (kubeVersion)
KUBE_VERSIONS = (kv.latest_version(), "1.27")


class _StrictLoader(yaml.SafeLoader):
    """YAML loader that rejects duplicate keys, as the API server's strict decoding does."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False
                   ) -> dict[Any, Any]:
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {dupes}",
                                                node.start_mark)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def _values(path: Path | None) -> dict[str, Any] | None:
    return yaml.safe_load(path.read_text()) if path else None


def render(values: dict[str, Any] | None = None, *, name: str = "rel",
           namespace: str = "kv") -> list[dict[str, Any]]:
    """`helm template`: every rendered object (NOTES.txt and empty documents left out)."""
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(values, name=name, namespace=namespace, is_install=True)
    docs = []
    for path, text in sorted(files.items()):
        if not path.endswith(".yaml"):
            continue
        for doc in yaml.load_all(text, Loader=_StrictLoader):  # a SafeLoader subclass
            if doc:
                doc["__template__"] = path
                docs.append(doc)
    return docs


def notes(values: dict[str, Any] | None = None) -> str:
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(values, name="rel", namespace="kv", is_install=True)
    return next(text for path, text in files.items() if path.endswith("NOTES.txt"))


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    workload = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]
    assert len(workload) == 1
    spec: dict[str, Any] = workload[0]["spec"]["template"]["spec"]
    return spec


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


CASES = [pytest.param(None, id="defaults")] + [pytest.param(p, id=p.stem) for p in CI_FILES]


def test_ci_values_files_cover_the_modes() -> None:
    names = {p.name for p in CI_FILES}
    assert {"deployment-values.yaml", "daemonset-values.yaml",
            "everything-on-values.yaml"} <= names


# ---- helm lint / helm template ---------------------------------------------------------------

@pytest.mark.parametrize("values_file", CASES)
def test_chart_lints_clean(values_file: Path | None) -> None:
    report = helm.lint(str(CHART), _values(values_file), strict=True, namespace="kv",
                       kube_version=f"v{kv.latest_version()}.0")
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize("values_file", CASES)
def test_every_rendered_manifest_validates(values_file: Path | None) -> None:
    docs = render(_values(values_file))
    assert docs
    for doc in docs:
        template = doc.pop("__template__")
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            _validate_service_monitor(doc)
            continue
        for version in KUBE_VERSIONS:
            try:
                kv.validate(doc, version, strict=True)
            except kv.ValidationError as exc:  # pragma: no cover - the failure message
                pytest.fail(f"{template} ({doc['kind']}) invalid for Kubernetes {version}: "
                            f"{exc.message} at {list(exc.path)}")
        labels = doc["metadata"]["labels"]
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                    "app.kubernetes.io/version", "app.kubernetes.io/managed-by",
                    "helm.sh/chart"):
            assert key in labels, f"{template}: label {key} missing"
        assert doc["metadata"]["namespace"] == "kv"


#: the fields of monitoring.coreos.com/v1 ServiceMonitor the chart sets (a subset of the CRD)
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {"type": "object", "properties": {
                    "matchLabels": {"type": "object",
                                    "additionalProperties": {"type": "string"}}}},
                "namespaceSelector": {"type": "object", "properties": {
                    "matchNames": {"type": "array", "items": {"type": "string"}}}},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "port": {"type": "string"}, "path": {"type": "string"},
                        "interval": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},  # noqa: E501
                        "scrapeTimeout": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},  # noqa: E501
                    }}},
            },
        },
    },
}


def _validate_service_monitor(doc: dict[str, Any]) -> None:
    import jsonschema

    jsonschema.validate(doc, SERVICE_MONITOR_SCHEMA)


def test_deployment_mode_objects() -> None:
    docs = render(_values(CHART / "ci" / "deployment-values.yaml"))
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["ConfigMap", "Deployment", "PodDisruptionBudget", "Pod", "Secret",
                            "Service", "ServiceAccount"])
    assert one(docs, "Deployment")["spec"]["replicas"] == 3
    assert one(docs, "Service")["spec"]["internalTrafficPolicy"] == "Cluster"
    node_id = env_of(pod_spec(docs)["containers"][0])["S3KV_NODE_ID"]
    assert node_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_daemonset_mode_uses_the_local_node_gateway() -> None:
    docs = render(_values(CHART / "ci" / "daemonset-values.yaml"))
    kinds = {d["kind"] for d in docs}
    assert "DaemonSet" in kinds and "Deployment" not in kinds
    assert "PodDisruptionBudget" not in kinds  # drains skip DaemonSet pods
    assert "Secret" not in kinds  # existingSecret
    assert one(docs, "Service")["spec"]["internalTrafficPolicy"] == "Local"
    ds = one(docs, "DaemonSet")
    # the replica id is the node name: two pods on one node must never overlap
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0
    spec = pod_spec(docs)
    env = env_of(spec["containers"][0])
    assert env["S3KV_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["S3KV_SECRET_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "s3kv-credentials"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "internalTrafficPolicy: Local" in notes(_values(CHART / "ci" /
                                                          "daemonset-values.yaml"))


def test_everything_optional_on() -> None:
    docs = render(_values(CHART / "ci" / "everything-on-values.yaml"))
    kinds = {d["kind"] for d in docs}
    assert {"HorizontalPodAutoscaler", "ServiceMonitor", "NetworkPolicy", "Job",
            "PersistentVolumeClaim", "PodDisruptionBudget"} <= kinds
    assert "replicas" not in one(docs, "Deployment")["spec"]  # the HPA owns the count
    netpol = one(docs, "NetworkPolicy")["spec"]
    assert netpol["policyTypes"] == ["Ingress", "Egress"]
    assert {"rel-s3kv-client": "true"} in [
        p.get("podSelector", {}).get("matchLabels") for p in netpol["ingress"][0]["from"]]
    job = one(docs, "Job")
    assert job["metadata"]["name"] == "rel-s3kv-sweep-1"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert "s3kv sweep --endpoint" in container["args"][0]
    assert env_of(container)["SWEEP_ENDPOINT"]["value"].startswith("http://minio1")
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["results"]["persistentVolumeClaim"]["claimName"] == "rel-s3kv-sweep"
    pvc = one(docs, "PersistentVolumeClaim")
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_sweep_output_on_an_empty_dir() -> None:
    docs = render({"sweep": {"enabled": True, "endpoint": "http://minio:9000"}})
    assert not by_kind(docs, "PersistentVolumeClaim")
    volumes = {v["name"]: v for v in one(docs, "Job")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["results"] == {"name": "results", "emptyDir": {}}


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
    docs = render(_values(values_file))
    data = one(docs, "ConfigMap")["data"]
    assert data, "the ConfigMap is empty"
    assert set(data) <= Settings.env_names(), set(data) - Settings.env_names()
    # and the gateway accepts them: the same parsing and validation `s3kv serve` does
    settings = Settings.load(env=data)
    check_settings(settings)
    assert settings.listen == "0.0.0.0:9470"
    values = _values(values_file) or {}
    expected = copy.deepcopy(yaml.safe_load((CHART / "values.yaml").read_text())["config"])
    expected.update(values.get("config", {}))
    for name, raw in expected.items():
        assert getattr(settings, name) == Settings.parse_value(name, raw), name
    # secrets never land in the ConfigMap
    assert "S3KV_SECRET_KEY" not in data and "S3KV_ACCESS_KEY" not in data


def test_whole_numbers_render_without_an_exponent() -> None:
    data = one(render({"config": {"segment_size": 268435456, "ttl": 604800,
                                  "seal_after": 0.5}}), "ConfigMap")["data"]
    assert data["S3KV_SEGMENT_SIZE"] == "268435456"
    assert data["S3KV_TTL"] == "604800"
    assert data["S3KV_SEAL_AFTER"] == "0.5"


# ---- the pod ---------------------------------------------------------------------------------

def test_gateway_pod_is_hardened_and_drains() -> None:
    docs = render()
    spec = pod_spec(docs)
    container = spec["containers"][0]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    sleep = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert spec["terminationGracePeriodSeconds"] >= sleep + 30
    assert container["args"] == ["serve"]
    assert container["ports"][0]["containerPort"] == 9470
    annotations = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert {"checksum/config", "checksum/secret"} <= set(annotations)
    env = env_of(container)
    assert {"S3KV_ACCESS_KEY", "S3KV_SECRET_KEY", "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY"} <= set(env)
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["optional"] is True


def test_pods_roll_when_config_or_credentials_change() -> None:
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        ann: dict[str, str] = one(render(values), "Deployment")["spec"]["template"][
            "metadata"]["annotations"]
        return ann

    base = annotations({})
    assert base == annotations({})  # stable: no rollout without a change
    changed = annotations({"config": {"seal_after": 2}})
    assert changed["checksum/config"] != base["checksum/config"]
    assert changed["checksum/secret"] == base["checksum/secret"]
    rotated = annotations({"credentials": {"backend": {"accessKeyId": "k",
                                                       "secretAccessKey": "s"}}})
    assert rotated["checksum/secret"] != base["checksum/secret"]


def test_front_keys_are_generated_when_not_given() -> None:
    secret = one(render(), "Secret")
    assert secret["data"]["S3KV_ACCESS_KEY"] and secret["data"]["S3KV_SECRET_KEY"]
    assert "AWS_ACCESS_KEY_ID" not in secret["data"]  # no backend keys given: left unset
    assert "WARNING: no backend credentials" in notes()


def test_helm_test_pod_round_trips_a_block() -> None:
    docs = render()
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["metadata"]["labels"]["rel-s3kv-client"] == "true"  # passes the NetworkPolicy
    container = pod["spec"]["containers"][0]
    script = container["args"][0]
    compile(script, "helm-test", "exec")  # the inline script is valid Python
    for call in ("put_object", "get_object", "remove_object", "stat_object"):
        assert call in script
    env = env_of(container)
    assert env["S3KV_TEST_ENDPOINT"]["value"] == "rel-s3kv.kv.svc:9470"
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_notes_show_the_endpoint_and_a_first_put_get() -> None:
    text = notes()
    assert "http://rel-s3kv.kv.svc:9470" in text
    assert "s3 cp block.bin s3://demo/block-0" in text
    assert "helm test rel" in text
