"""deploy/: the container image, the MinIO node files and the compose stack.

No Docker engine runs on these machines, so the image is never built here: the Dockerfile is
checked statically (multi-stage, slim base, non-root user, entry point, HEALTHCHECK), and the
HEALTHCHECK command itself is run against a real HTTP server on loopback. The compose file and
MinIO files are parsed and cross-checked against the settings table and each other.
"""

from __future__ import annotations

import http.server
import json
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from itertools import product
from pathlib import Path
from typing import Any

import pytest
import yaml

from s3kv.cli import build_parser
from s3kv.config import Settings
from s3kv.gateway.server import check_settings
from tests.support.s3server import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
MINIO = ROOT / "deploy" / "minio"


# ---- Dockerfile --------------------------------------------------------------------------------

def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for ins in _instructions():
        if ins[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def test_dockerfile_is_multi_stage_on_a_slim_base() -> None:
    stages = _stages()
    assert len(stages) >= 2
    args = dict(a.split("=", 1) for w, a in _instructions() if w == "ARG" and "=" in a)
    for stage in stages:
        base = stage[0][1].split()[0]
        base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
        assert base.startswith("python:") and "slim" in base, base
    final = stages[-1]
    # nothing from the build stage but the installed virtual environment
    copies_from = [a for w, a in final if w == "COPY" and "--from=" in a]
    assert copies_from == ["--from=build /opt/s3kv /opt/s3kv"]
    assert not [a for w, a in final if w == "COPY" and "--from=" not in a]


def test_dockerfile_runs_s3kv_as_a_non_root_user() -> None:
    final = _stages()[-1]
    users = [a for w, a in final if w == "USER"]
    assert users, "no USER in the final stage"
    user = users[-1].split(":")[0]
    assert user not in ("0", "root")
    assert int(user) >= 1000
    assert [a for w, a in final if w == "ENTRYPOINT"] == ['["s3kv"]']
    assert [a for w, a in final if w == "CMD"] == ['["serve"]']
    expose = [a for w, a in final if w == "EXPOSE"]
    assert expose == [Settings().listen.rsplit(":", 1)[1]]


def test_dockerfile_copies_only_what_exists_and_is_not_ignored() -> None:
    build = _stages()[0]
    sources = [a.split()[:-1] for w, a in build if w == "COPY"]
    ignore = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for group in sources:
        for src in group:
            assert (ROOT / src).exists(), src
            assert src.rstrip("/") in allowed, f"{src} is excluded from the build context"


def _healthcheck_command() -> list[str]:
    final = _stages()[-1]
    (check,) = [a for w, a in final if w == "HEALTHCHECK"]
    assert "curl" not in check and "wget" not in check
    cmd = check.split(" CMD ", 1)[1]
    argv: list[str] = json.loads(cmd)
    assert argv[0] == "python"
    return argv


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_command_probes_healthz(health_server: int) -> None:
    """The HEALTHCHECK's own command, run here against /healthz on loopback."""
    argv = [sys.executable, *_healthcheck_command()[1:]]
    env = {"S3KV_LISTEN": f"0.0.0.0:{health_server}"}
    ok = subprocess.run(argv, env=env, capture_output=True, timeout=20)
    assert ok.returncode == 0, ok.stderr
    dead = subprocess.run(argv, env={"S3KV_LISTEN": f"0.0.0.0:{free_port()}"},
                          capture_output=True, timeout=20)
    assert dead.returncode != 0


# ---- MinIO on QLC nodes --------------------------------------------------------------------

def _env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = shlex.split(value)[0] if value else ""
    return out


def expand_ellipses(pattern: str) -> list[str]:
    """MinIO's `{a...b}` notation (as in MINIO_VOLUMES) expanded in MinIO's order."""
    parts = re.split(r"\{(\d+)\.\.\.(\d+)\}", pattern)
    fixed, ranges = parts[0::3], list(zip(parts[1::3], parts[2::3], strict=True))
    out = []
    for combo in product(*[range(int(a), int(b) + 1) for a, b in ranges]):
        s = fixed[0]
        for n, tail in zip(combo, fixed[1:], strict=True):
            s += str(n) + tail
        out.append(s)
    return out


def test_minio_env_expands_to_nodes_times_24_drives() -> None:
    env = _env_file(MINIO / "minio.env")
    drives = expand_ellipses(env["MINIO_VOLUMES"])
    hosts = {re.match(r"http://([^:/]+)", d).group(1) for d in drives}  # type: ignore[union-attr]
    assert len(hosts) == 8 and len(drives) == 8 * 24
    per_host = {h: sum(1 for d in drives if f"//{h}:" in d) for h in hosts}
    assert set(per_host.values()) == {24}
    assert env["MINIO_STORAGE_CLASS_STANDARD"] == "EC:2"
    assert env["MINIO_OPTS"].startswith("--address :9000")


def test_systemd_unit_reads_the_env_file() -> None:
    unit = (MINIO / "minio.service").read_text()
    assert "EnvironmentFile=-/etc/default/minio" in unit
    assert "ExecStart=/usr/local/bin/minio server $MINIO_OPTS $MINIO_VOLUMES" in unit
    assert "LimitNOFILE=1048576" in unit
    assert re.search(r"^User=minio-user$", unit, re.M)


def test_parity_table_is_the_arithmetic() -> None:
    """Every row of the README's parity table: usable share, TB and write cost from K and M."""
    readme = (MINIO / "README.md").read_text()
    raw_tb = 8 * 24 * 122.88
    rows = re.findall(r"^\| EC:(\d+)[^|]*\| (\d+):(\d+) \| ([\d.]+)% \| ([\d,.]+) \| ([\d.]+) \|",
                      readme, re.M)
    assert len(rows) == 5
    for m, k, m2, share, tb, cost in rows:
        k_, m_ = int(k), int(m2)
        assert int(m) == m_ and k_ + m_ == 16
        assert float(share) == pytest.approx(100 * k_ / 16, abs=0.05)
        assert float(tb.replace(",", "")) == pytest.approx(raw_tb * k_ / 16, abs=0.01)
        assert float(cost) == pytest.approx(16 / k_, abs=0.0005)


def test_gateway_policy_grants_what_doctor_asks_for() -> None:
    policy = json.loads((MINIO / "s3kv-policy.json").read_text())
    actions = {a for st in policy["Statement"] for a in st["Action"]}
    for needed in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket",
                   "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"):
        assert needed in actions


def test_sysctl_file_is_key_equals_value() -> None:
    for line in (MINIO / "sysctl-s3kv.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert re.match(r"^[a-z0-9_.-]+ = \S", line), line


# ---- compose ---------------------------------------------------------------------------------

def test_compose_wires_minio_gateway_and_prometheus() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    assert {"minio1", "minio2", "minio3", "minio4", "gateway", "prometheus", "setup"} <= set(
        services)
    # the MinIO command names exactly the four MinIO services
    command = services["minio1"]["command"]
    volumes_arg = command.split()[-1]
    hosts = {re.match(r"http://([^/]+)/", d).group(1)  # type: ignore[union-attr]
             for d in expand_ellipses(volumes_arg)}
    assert hosts == {"minio1", "minio2", "minio3", "minio4"}
    # the gateway's S3KV_* variables are settings it reads; its store points at those nodes
    env = services["gateway"]["environment"]
    s3kv_vars = {k for k in env if k.startswith("S3KV_")}
    assert s3kv_vars <= Settings.env_names(), s3kv_vars - Settings.env_names()
    settings = Settings.load(env={k: str(env[k]) for k in s3kv_vars})
    check_settings(settings)
    endpoints = re.search(r"endpoint=([^&]+)", settings.store).group(1)  # type: ignore[union-attr]
    assert {e.split("//")[1].split(":")[0] for e in endpoints.split(",")} == hosts
    port = settings.listen.rsplit(":", 1)[1]
    assert services["gateway"]["ports"] == [f"{port}:{port}"]
    assert services["gateway"]["build"]["dockerfile"] == "deploy/docker/Dockerfile"
    assert (ROOT / "deploy" / services["gateway"]["build"]["context"] /
            services["gateway"]["build"]["dockerfile"]).exists()
    # the one-shot setup is a valid `s3kv doctor --setup` invocation, run before the gateway
    args = build_parser().parse_args(services["setup"]["command"])
    assert args.command == "doctor" and args.setup and args.bucket == "s3kv"
    assert services["gateway"]["depends_on"]["setup"]["condition"] == \
        "service_completed_successfully"
    # Prometheus scrapes the gateway on its port
    mount = services["prometheus"]["volumes"][0].split(":")[0]
    prom = yaml.safe_load((ROOT / "deploy" / mount).read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"]
               for t in sc["targets"]}
    assert f"gateway:{port}" in targets
    assert {"minio1:9000", "minio4:9000"} <= targets


def test_compose_prometheus_loads_the_alert_rules(tmp_path: Path) -> None:
    """Before, compose's Prometheus mounted prometheus.yml alone and it named no rule_files:
    the stack never evaluated deploy/prometheus/s3kv-alerts.yml. Now every rule file it names
    is mounted where the container's Prometheus resolves it (beside its config), and promtool
    checks the config with its rules laid out as in the container."""
    import shutil

    services = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["services"]
    mounts = {}
    for volume in services["prometheus"]["volumes"]:
        source, _, target = volume.partition(":")
        if source.startswith("./"):
            mounts[target.split(":")[0]] = ROOT / "deploy" / source
    config_path = "/etc/prometheus/prometheus.yml"
    assert services["prometheus"]["command"][0] == f"--config.file={config_path}"
    config = yaml.safe_load(mounts[config_path].read_text())
    rule_files = config.get("rule_files", [])
    assert rule_files, "compose's Prometheus loads no alert rules"
    container_dir = Path(config_path).parent
    for name in rule_files:
        mounted = mounts.get(str(container_dir / name))
        assert mounted is not None, f"{name} is not mounted beside {config_path}"
        assert mounted.resolve() == (ROOT / "deploy" / "prometheus" / "s3kv-alerts.yml")
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    for target, source in mounts.items():  # the container's /etc/prometheus, here
        (tmp_path / Path(target).name).write_bytes(source.read_bytes())
    out = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "6 rules found" in out.stdout + out.stderr


def _minio_set_size(nodes: int, drives_per_node: int) -> int:
    """MinIO's choice for `http://host{1...N}/drive{1...D}` (cmd/endpoint-ellipses.go,
    getSetIndexes): the set sizes 2..16 dividing the drive count, kept if symmetric with the
    ellipsis patterns (the loop's last assignment wins, and the host pattern, leftmost, is the
    last one FindEllipsesPatterns returns), then commonSetDriveCount's largest."""
    total = nodes * drives_per_node
    sizes = [s for s in range(2, 17) if total % s == 0]
    symmetric = [s for s in sizes if (nodes % s == 0 if nodes > s else s % nodes == 0)]
    return total if total < symmetric[-1] else symmetric[-1]


def test_set_size_table_is_minios_rule() -> None:
    """Before, the README said 24-drive nodes get sets of 16 "when the node count is even" and
    of 12 "when it is odd": wrong for 5 to 7 and 9 to 15 nodes (6 nodes: 12; 7: 14; 9: 9), and
    so was the parity that survives a node there. Now it tabulates MinIO's rule per node count."""
    readme = (MINIO / "README.md").read_text()
    rows = {m.group(1): [int(x) for x in m.group(2).split("|") if x.strip()]
            for m in re.finditer(r"^\| (nodes|drives per set|a node's drives in each set) \|"
                                 r"([\d| ]+)\|$", readme, re.M)}
    assert rows["nodes"] == list(range(1, 17))
    for nodes, size, per_node in zip(rows["nodes"], rows["drives per set"],
                                     rows["a node's drives in each set"], strict=True):
        assert size == _minio_set_size(nodes, 24), nodes
        assert per_node == size // nodes if size >= nodes else per_node == 1
    assert "node count is even" not in readme + (MINIO / "minio.env").read_text()
    # the parity table's 16-drive sets are the 8 nodes of minio.env
    assert _minio_set_size(8, 24) == 16
