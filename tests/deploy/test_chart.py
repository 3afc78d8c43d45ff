"""The Helm chart (charts/s3kv): lint, render, Kubernetes schema validation, what each mode
renders (the values schema: test_chart_values.py).

`helm lint` and `helm template` run in-process with Helm's own Go SDK (tests/deploy/chart.py).
`kubernetes-validate` ships the Kubernetes OpenAPI schemas (strict variants reject unknown
fields) and works offline. It has no schemas for CRDs, so the ServiceMonitor (Prometheus
Operator) is checked against a structural subset of its CRD written out below, not the CRD
itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate as kv
import pytest

from tests.deploy.chart import (
    CASES,
    CHART,
    CI_FILES,
    ROOT,
    by_kind,
    env_of,
    load_values,
    notes,
    one,
    pod_spec,
    render,
)

#: the newest Kubernetes the validator ships, and the oldest the chart declares (kubeVersion)
KUBE_VERSIONS = (kv.latest_version(), "1.27")


def test_ci_values_files_cover_the_modes() -> None:
    names = {p.name for p in CI_FILES}
    assert {"deployment-values.yaml", "daemonset-values.yaml",
            "everything-on-values.yaml"} <= names


# ---- helm lint / helm template ---------------------------------------------------------------

@pytest.mark.parametrize("values_file", CASES)
def test_chart_lints_clean(values_file: Path | None) -> None:
    report = helm.lint(str(CHART), load_values(values_file), strict=True, namespace="kv",
                       kube_version=f"v{kv.latest_version()}.0")
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize("values_file", CASES)
def test_every_rendered_manifest_validates(values_file: Path | None) -> None:
    docs = render(load_values(values_file))
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
    docs = render(load_values(CHART / "ci" / "deployment-values.yaml"))
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["ConfigMap", "Deployment", "PodDisruptionBudget", "Pod", "Secret",
                            "Service", "Service", "ServiceAccount"])
    assert one(docs, "Deployment")["spec"]["replicas"] == 3
    services = {d["metadata"]["name"]: d["spec"] for d in by_kind(docs, "Service")}
    assert services["rel-s3kv"]["internalTrafficPolicy"] == "Cluster"
    # S3 clients keep one replica, so they read their own writes at once
    assert services["rel-s3kv"]["sessionAffinity"] == "ClientIP"
    # native clients resolve the headless Service: one record per pod, a home for every key
    headless = services["rel-s3kv-headless"]
    assert headless["clusterIP"] == "None"
    assert headless["selector"] == services["rel-s3kv"]["selector"]
    assert headless["ports"] == services["rel-s3kv"]["ports"]
    node_id = env_of(pod_spec(docs)["containers"][0])["S3KV_NODE_ID"]
    assert node_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_daemonset_mode_uses_the_local_node_gateway() -> None:
    docs = render(load_values(CHART / "ci" / "daemonset-values.yaml"))
    kinds = {d["kind"] for d in docs}
    assert "DaemonSet" in kinds and "Deployment" not in kinds
    assert "PodDisruptionBudget" not in kinds  # drains skip DaemonSet pods
    assert "Secret" not in kinds  # existingSecret
    assert one(docs, "Service")["spec"]["internalTrafficPolicy"] == "Local"
    assert one(docs, "Service")["spec"]["sessionAffinity"] == "None"  # no headless one either
    ds = one(docs, "DaemonSet")
    # the replica id is the node name: two pods on one node must never overlap
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0
    spec = pod_spec(docs)
    env = env_of(spec["containers"][0])
    assert env["S3KV_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["S3KV_SECRET_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "s3kv-credentials"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "internalTrafficPolicy: Local" in notes(load_values(CHART / "ci" /
                                                          "daemonset-values.yaml"))


def test_everything_optional_on() -> None:
    docs = render(load_values(CHART / "ci" / "everything-on-values.yaml"))
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


def test_grafana_dashboard_configmap() -> None:
    assert not [d for d in by_kind(render(), "ConfigMap") if "dashboard" in d["metadata"]["name"]]
    docs = render({"grafanaDashboard": {"enabled": True, "namespace": "monitoring",
                                        "annotations": {"grafana_folder": "KV cache"}}})
    cm = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] ==
              "rel-s3kv-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's label
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "KV cache"}
    dashboard = ROOT / "deploy" / "grafana" / "s3kv.json"
    assert json.loads(cm["data"]["s3kv.json"]) == json.loads(dashboard.read_text())
    # the chart can only read its own files: its copy must be the deploy/ file itself
    assert (CHART / "dashboards" / "s3kv.json").read_bytes() == dashboard.read_bytes()


def test_service_monitor_scrapes_only_the_normal_service() -> None:
    docs = render({"serviceMonitor": {"enabled": True}})
    selector = one(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    matching = [d["metadata"]["name"] for d in by_kind(docs, "Service")
                if selector.items() <= d["metadata"]["labels"].items()]
    assert matching == ["rel-s3kv"]  # each pod scraped once, not once per Service


def test_sweep_output_on_an_empty_dir() -> None:
    docs = render({"sweep": {"enabled": True, "endpoint": "http://minio:9000"}})
    assert not by_kind(docs, "PersistentVolumeClaim")
    volumes = {v["name"]: v for v in one(docs, "Job")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["results"] == {"name": "results", "emptyDir": {}}



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


def test_notes_warn_of_a_memory_autoscaling_target() -> None:
    """A gateway's memory is no load signal: its resident set stays at its high-water mark
    (s3kv/gateway/heap.py keeps freed buffers for reuse; docs/operations.md) and its DRAM tier
    stays full, so an HPA memory target passed once scales up and never down. Before, the chart
    rendered one without a word (ci/everything-on-values.yaml sets 80 %); now NOTES.txt warns."""
    on = {"autoscaling": {"enabled": True, "targetMemoryUtilizationPercentage": 80}}
    assert "WARNING: autoscaling.targetMemoryUtilizationPercentage" in notes(on)
    cpu_only = {"autoscaling": {"enabled": True}}
    assert "targetMemoryUtilizationPercentage" not in notes(cpu_only)
    assert "targetMemoryUtilizationPercentage" not in notes()
