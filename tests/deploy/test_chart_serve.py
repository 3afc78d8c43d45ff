"""The chart's gateway container, run: ``s3kv serve`` started with exactly the rendered
container's args and environment (the ConfigMap's data, the Secret's keys, the downward-API node
id, extraEnv) against a real S3 server (moto), its three probes asked as the kubelet asks them,
then the SIGTERM a pod's termination sends.

Not run here (no cluster): the image itself (its entry point ``s3kv`` is the console script
``s3kv.cli:main``, started as ``python -m s3kv.cli``), the read-only root filesystem and the
kubelet's probe timing. The store of each values file is pointed at moto and the listen port at
a free one, and a DRAM tier larger than a quarter of this machine's memory is made 1 GiB (the
daemonset example's 32 GiB); everything else is rendered as the values file has it.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from s3kv.gateway.memlimit import memory_limit
from s3kv.sizes import parse_size
from tests.deploy.chart import CASES, by_kind, load_values, pod_spec, render
from tests.support.s3server import ACCESS_KEY, SECRET_KEY, MotoServer, free_port

ROOT = Path(__file__).resolve().parents[2]


def _container_env(docs: list[dict[str, Any]], secret_data: dict[str, str]
                   ) -> dict[str, str]:
    """The environment the kubelet gives the gateway container: envFrom, then env."""
    container = pod_spec(docs)["containers"][0]
    configmaps = {d["metadata"]["name"]: d["data"] for d in by_kind(docs, "ConfigMap")}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(configmaps[source["configMapRef"]["name"]])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        ref = item["valueFrom"]
        if "secretKeyRef" in ref:
            key = ref["secretKeyRef"]
            if key["key"] in secret_data:
                env[item["name"]] = secret_data[key["key"]]
            else:
                assert key.get("optional"), f"{item['name']}: {key} is not in the Secret"
        else:
            assert ref["fieldRef"]["fieldPath"] in ("metadata.name", "spec.nodeName")
            env[item["name"]] = "rel-s3kv-7d9f8-abcde"
    return env


def _get(url: str, timeout: float) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.parametrize("values_file", CASES)
def test_gateway_runs_with_the_rendered_container(values_file: Path | None,
                                                  s3_server: MotoServer, s3_client: Any,
                                                  tmp_path: Path) -> None:
    values = load_values(values_file) or {}
    bucket = f"chart-{free_port()}"
    s3_client.create_bucket(Bucket=bucket)
    port = free_port()
    values = {**values, "containerPort": port,
              "config": {**values.get("config", {}),
                         "store": f"s3://{bucket}/kv/?endpoint={s3_server.endpoint}"}}
    limit = memory_limit()
    if limit is not None and parse_size(values["config"].get("dram_cache", 0)) > limit // 4:
        # the values file's node has the memory its DRAM tier asks for; this machine may not,
        # and `s3kv serve` refuses settings it could not hold (gateway/memlimit.py)
        values["config"]["dram_cache"] = "1GiB"
    if values.get("credentials", {}).get("existingSecret"):
        secret_data = {"S3KV_ACCESS_KEY": "existingfront", "S3KV_SECRET_KEY": "existing-secret",
                       "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    else:
        values["credentials"] = {**values.get("credentials", {}),
                                 "backend": {"accessKeyId": ACCESS_KEY,
                                             "secretAccessKey": SECRET_KEY}}
    docs = render(values)
    if not values.get("credentials", {}).get("existingSecret"):
        secret = next(d for d in by_kind(docs, "Secret"))
        secret_data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    env = _container_env(docs, secret_data)
    assert env["S3KV_LISTEN"] == f"0.0.0.0:{port}"
    spec = pod_spec(docs)
    container = spec["containers"][0]
    # nothing from the test run leaks in: only the container's variables and what Python needs
    run_env = {**env, "PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT),
               "HOME": str(tmp_path)}
    log = (tmp_path / "gateway.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "s3kv.cli", *container["args"]], env=run_env,
                            stdout=log, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir())
    try:
        probes = {"startupProbe": 0, "livenessProbe": 0, "readinessProbe": 0}
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "gateway.log").read_text()[-3000:]
            try:
                for name in probes:
                    probe = container[name]
                    get = probe["httpGet"]
                    port_of = {p["name"]: p["containerPort"] for p in container["ports"]}
                    url = f"http://127.0.0.1:{port_of[get['port']]}{get['path']}"
                    probes[name] = _get(url, probe["timeoutSeconds"])
                if all(code == 200 for code in probes.values()):
                    break
            except (urllib.error.URLError, OSError):
                pass
            assert time.monotonic() < deadline, (probes,
                                                 (tmp_path / "gateway.log").read_text()[-3000:])
            time.sleep(0.2)
        text = (tmp_path / "gateway.log").read_text()
        assert "unknown_env" not in text and "unknown setting" not in text, text[-3000:]
        # the pod's termination: preStop's sleep, then SIGTERM; the gateway must be gone well
        # within what is left of the grace period
        assert container["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
        sleep = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
        left = spec["terminationGracePeriodSeconds"] - sleep
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=left) == 0
        assert time.monotonic() - started < left
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
