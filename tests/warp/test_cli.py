"""The commands end to end: `s3kv bench` output, and Ctrl-C during a sweep keeps the records."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from s3kv.cli import main
from s3kv.errors import ConfigError
from s3kv.procs import module_argv
from warp.localserver import LocalS3Server
from warp.records import read_records


def test_bench_put_json(s3_server: Any, bucket: str, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    records = tmp_path / "put.csv.zst"
    code = main(["bench", "put", "--endpoint", s3_server.endpoint, "--bucket", bucket,
                 "--obj-size", "16KiB", "--concurrent", "2", "--duration", "1s", "--trim", "0",
                 "--benchdata", str(records), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    [put] = doc["operations"]
    assert put["op"] == "PUT" and put["errors"] == 0
    assert put["ops"] == len(read_records(records)) > 0
    assert put["run_bytes"] == 16 * 1024 * put["ops"]


def test_bench_help_lists_every_type(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = capsys.readouterr().out
    for name in ("put", "get", "mixed", "stat", "delete", "list"):
        assert name in text


def test_ctrl_c_stops_a_sweep_cleanly(s3_server: Any, bucket: str, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3kv.cli", "sweep", "--clients", "2", "--ops", "put",
         "--endpoint", s3_server.endpoint, "--bucket", bucket, "--obj-size", "16KiB",
         "--concurrent", "2", "--duration", "60", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not list((out / "clients").glob("*.csv.zst")):
        time.sleep(0.2)
    time.sleep(2.0)  # the phase is running
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    records = read_records(out / "put-02c.csv.zst")
    assert records and {r.client_id for r in records} == {"c1", "c2"}
    doc = json.loads((out / "summary.json").read_text())
    assert doc["interrupted"] is True
    assert doc["phases"][0]["ops"] == len(records)
    assert (out / "sweep.png").exists()


def test_the_local_server_ends_with_a_killed_command() -> None:
    """`s3kv sweep`/`bench` without --endpoint start a local S3 server in its own session; a
    command killed without clean-up (SIGTERM, SIGKILL, a CI timeout) must not leave it."""
    starter = subprocess.Popen(
        [sys.executable, "-c", "import time; from warp.localserver import LocalS3Server; "
         "print(LocalS3Server().start(), flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True)
    server: psutil.Process | None = None
    try:
        assert starter.stdout is not None
        assert starter.stdout.readline().startswith("http://127.0.0.1:")
        [server] = psutil.Process(starter.pid).children()
        starter.kill()
        starter.wait()
        server.wait(timeout=10)  # psutil.TimeoutExpired: the server outlived its command
    finally:
        starter.kill()
        if server is not None and server.is_running():
            server.kill()


def test_a_file_named_like_a_package_where_the_command_runs_is_not_imported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m` puts the working directory first on sys.path: a moto.py there was imported
    by the local S3 server in place of moto (one that starts a local server itself made every
    server start another, without end). The package's child processes run with -P."""
    (tmp_path / "moto.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\nraise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    server = LocalS3Server()
    try:
        assert server.start().startswith("http://127.0.0.1:")
    finally:
        server.stop()
    assert not (tmp_path / "imported").exists()
    assert module_argv("warp.client")[1:3] == ["-P", "-m"]


def test_a_local_server_that_does_not_start_leaves_the_log_its_error_names() -> None:
    """The error said "see LOG" of a log the clean-up had just removed."""
    server = LocalS3Server(argv=[sys.executable, "-c", "print('stuck', flush=True); "
                                 "import time; time.sleep(60)"])
    with pytest.raises(ConfigError, match="did not start in 1s; see ") as err:
        server.start(timeout=1)
    log = Path(str(err.value).rsplit("see ", 1)[1])
    assert log.read_text().strip() == "stuck"
    log.unlink()
