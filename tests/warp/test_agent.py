"""A sweep whose clients run on an `s3kv agent` (here on loopback), and --autoterm's rule."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from s3kv.clock import now_s
from warp.recorder import LiveStats
from warp.records import read_records


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sweep_on_an_agent(s3_server: Any, bucket: str, tmp_path: Path) -> None:
    port = _free_port()
    agent = subprocess.Popen([sys.executable, "-m", "s3kv.cli", "agent", "--listen",
                              f"127.0.0.1:{port}", "--token", "sesame"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert agent.stdout is not None
        assert "listening" in agent.stdout.readline()
        out = tmp_path / "sweep"
        proc = subprocess.run(
            [sys.executable, "-m", "s3kv.cli", "sweep", "--clients", "1..2", "--ops", "put",
             "--agents", f"127.0.0.1:{port}", "--agent-token", "sesame",
             "--endpoint", s3_server.endpoint, "--bucket", bucket, "--obj-size", "16KiB",
             "--concurrent", "2", "--duration", "2", "--trim", "0.25", "--out", str(out),
             "--json"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        records = read_records(out / "put-02c.csv.zst")
        assert {r.client_id for r in records} == {"c1", "c2"}
        # both clients of the phase started together (synchronized start)
        firsts = [min(r.start_ns for r in records if r.client_id == c) for c in ("c1", "c2")]
        assert abs(firsts[0] - firsts[1]) < 0.5e9
        assert [row["clients"] for row in json.loads(proc.stdout)["table"]] == [1, 2]
        wrong = subprocess.run(
            [sys.executable, "-m", "s3kv.cli", "sweep", "--clients", "1", "--ops", "put",
             "--agents", f"127.0.0.1:{port}", "--agent-token", "nope", "--endpoint",
             s3_server.endpoint, "--bucket", bucket, "--duration", "1", "--trim", "0", "--out",
             str(tmp_path / "w")], capture_output=True, text=True, timeout=60)
        assert wrong.returncode != 0 and "token" in wrong.stderr
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_autoterm_rule() -> None:
    now = int(now_s())
    steady = LiveStats(per_second={s: 100.0 + (s % 2) for s in range(now - 20, now)})
    assert steady.stable(seconds=10, pct=7.5, since_s=now - 30)
    assert not steady.stable(seconds=10, pct=7.5, since_s=now - 5)  # not running long enough
    ramp = LiveStats(per_second={s: 10.0 * (s - now + 21) for s in range(now - 20, now)})
    assert not ramp.stable(seconds=10, pct=7.5, since_s=now - 30)


SKEW_S = 20  # the skewed agent's clock runs this far ahead of the coordinator's


def _agent(port: int, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "s3kv.cli", "agent", "--listen",
                             f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    assert "listening" in proc.stdout.readline()
    return proc


def test_records_of_an_agent_with_a_skewed_clock_are_put_on_the_coordinators_clock(
        s3_server: Any, bucket: str, tmp_path: Path) -> None:
    """The coordinator measures each agent's clock offset to start its clients at the same
    instant; the records those clients write carry the agent's clock, so the offset must be
    taken off them too, or the merged phase spreads one run over two time bases."""
    skew = tmp_path / "skew"
    skew.mkdir()
    (skew / "sitecustomize.py").write_text(
        "import time\n"
        f"_ns, _s = time.time_ns, time.time\n"
        f"time.time_ns = lambda: _ns() + {SKEW_S} * 10**9\n"
        f"time.time = lambda: _s() + {SKEW_S}\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(skew), *filter(None, [env.get("PYTHONPATH")])])
    ports = [_free_port(), _free_port()]
    agents = [_agent(ports[0]), _agent(ports[1], env)]
    try:
        out = tmp_path / "sweep"
        proc = subprocess.run(
            [sys.executable, "-m", "s3kv.cli", "sweep", "--clients", "2", "--ops", "put",
             "--agents", ",".join(f"127.0.0.1:{p}" for p in ports),
             "--endpoint", s3_server.endpoint, "--bucket", bucket, "--obj-size", "16KiB",
             "--concurrent", "2", "--duration", "2", "--trim", "0.25", "--out", str(out)],
            capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        records = read_records(out / "put-02c.csv.zst")
        firsts = [min(r.start_ns for r in records if r.client_id == c) for c in ("c1", "c2")]
        lasts = [max(r.end_ns for r in records if r.client_id == c) for c in ("c1", "c2")]
        assert abs(firsts[0] - firsts[1]) < 0.5e9
        assert abs(lasts[0] - lasts[1]) < 0.5e9
        assert max(lasts) - min(firsts) < 4e9  # one 2 s phase, not two 20 s apart
        ends = [r.end_ns for r in records]
        assert ends == sorted(ends)  # docs/warp-records.md: one line per operation, completed
    finally:
        for agent in agents:
            agent.terminate()
            agent.wait(timeout=10)


def test_a_request_the_agent_cannot_use_is_a_400_and_an_unknown_job_a_404() -> None:
    """Bad JSON, a job without its fields, settings a run refuses: 400 with the reason (was 500,
    or 404 "no such job" for a missing field); a job id it does not hold: 404."""
    import urllib.error
    import urllib.request

    port = _free_port()
    agent = _agent(port)
    base = f"http://127.0.0.1:{port}/v1/jobs"

    def call(method: str, url: str, body: bytes = b"") -> tuple[int, str]:
        req = urllib.request.Request(url, data=body or None, method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    try:
        for body in (b"not json", b"[1, 2]", b'{"records": "x"}',
                     json.dumps({"config": {"op": "put", "endpoints": ["ftp://x"]},
                                 "records": "r"}).encode()):
            status, text = call("POST", base, body)
            assert status == 400 and "bad request" in text, (body, status, text)
        for method, path in (("POST", "/nope/start"), ("GET", "/nope/events"),
                             ("POST", "/nope/stop"), ("GET", "/nope/records"),
                             ("DELETE", "/nope")):
            status, text = call(method, base + path, b"{}" if method == "POST" else b"")
            assert (status, json.loads(text)) == (404, {"error": "no such job"}), (path, text)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
