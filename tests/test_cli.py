"""The ``s3kv`` command line from a user's side: mistakes end in a message and an exit code.

Every case runs the real ``main()``: a bad flag value, an unusable path or address must print
``s3kv CMD: error: ...`` naming what to change and exit 2, never a Python traceback.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from s3kv.argtypes import listen_address
from s3kv.backends.file import FileBackend
from s3kv.cli import main
from s3kv.errors import BackendError, ConfigError
from s3kv.outputs import output_dir, output_file
from warp.flags import LOCAL_PROFILE, WARP_PROFILE
from warp.records import Record, write_records
from warp.units import parse_client_range

BAD_FLAG_VALUES = [
    (["sweep", "--obj-size", "-1"], "--obj-size", "invalid size '-1'"),
    (["sweep", "--duration", "abc"], "--duration", "invalid duration 'abc'"),
    (["sweep", "--trim", "-1"], "--trim", "invalid duration '-1'"),
    (["sweep", "--mixed-ratio", "get=x"], "--mixed-ratio", "invalid weight"),
    (["bench", "get", "--part-size", "1.5XB"], "--part-size", "invalid size unit 'XB'"),
    (["bench", "put", "--request-timeout", "soon"], "--request-timeout", "invalid duration"),
    (["bench", "kv", "--context-tokens", "many"], "--context-tokens", "uniform:LO-HI"),
    (["bench", "kv", "--batch-size", "32MB/s"], "--batch-size", "invalid size"),
    (["tune", "--endpoint", "http://x", "--bucket", "b", "--segment-sizes", "64MiB,12XB"],
     "--segment-sizes", "invalid size unit 'XB'"),
    (["tune", "--endpoint", "http://x", "--bucket", "b", "--concurrency", "1,four"],
     "--concurrency", "invalid list of integers"),
    (["tune", "--endpoint", "http://x", "--bucket", "b", "--budget", "1 minute"],
     "--budget", "invalid duration"),
    (["analyze", "--trim", "x", "f.csv.zst"], "--trim", "invalid duration 'x'"),
    (["plan", "--bytes-per-token", "-1"], "--bytes-per-token", "invalid size '-1'"),
]


@pytest.mark.parametrize(("argv", "flag", "message"), BAD_FLAG_VALUES,
                         ids=[f"{a[0][0]} {a[1]}" for a in BAD_FLAG_VALUES])
def test_a_bad_flag_value_is_a_usage_error(argv: list[str], flag: str, message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {flag}: " in err and message in err, err
    assert "Traceback" not in err


def _unwritable(tmp_path: Path) -> Path:
    """A path under a regular file: nothing can be created there, whoever runs the test."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    return blocker / "out"


def test_an_unwritable_sweep_out_is_an_error(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = _unwritable(tmp_path)
    code = main(["sweep", "--out", str(out), "--endpoint", "http://127.0.0.1:1",
                 "--clients", "1", "--ops", "put", "--duration", "1s", "--trim", "0"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"s3kv sweep: error: --out {out}: cannot create the directory" in err, err


def test_an_unwritable_benchdata_is_an_error_before_the_run(
        s3_server: Any, bucket: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    records = _unwritable(tmp_path) / "put.csv.zst"
    code = main(["bench", "put", "--endpoint", s3_server.endpoint, "--bucket", bucket,
                 "--obj-size", "4KiB", "--concurrent", "1", "--duration", "1s",
                 "--benchdata", str(records)])
    assert code == 2
    captured = capsys.readouterr()
    assert "s3kv bench: error: --benchdata " in captured.err, captured.err
    assert captured.out == ""  # nothing ran


def test_an_unwritable_write_config_is_an_error_before_tuning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = _unwritable(tmp_path) / "s3kv.toml"
    code = main(["tune", "--endpoint", "http://127.0.0.1:1", "--bucket", "b", "--budget", "1",
                 "--write-config", str(target)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"s3kv tune: error: --write-config {target}: cannot create its directory" in err, err


def test_an_output_directory_is_created(tmp_path: Path) -> None:
    assert output_dir(tmp_path / "a" / "b", "--out").is_dir()
    assert output_file(tmp_path / "c" / "r.csv.zst", "--benchdata").parent.is_dir()
    with pytest.raises(ConfigError, match="is a directory"):
        output_file(tmp_path, "--write-config")


def test_an_agent_on_a_taken_port_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["agent", "--listen", f"127.0.0.1:{port}"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"s3kv agent: error: cannot listen on 127.0.0.1:{port}: " in err, err
    assert "choose another --listen" in err


def test_an_agent_port_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--listen", "127.0.0.1:99999"]) == 2
    assert "port from 1 to 65535" in capsys.readouterr().err


def test_the_gateway_and_the_agent_read_listen_addresses_alike() -> None:
    assert listen_address("[::1]:7761") == ("::1", 7761)
    assert listen_address(":7761") == ("0.0.0.0", 7761)
    with pytest.raises(ConfigError, match="port from 1 to 65535"):
        listen_address("127.0.0.1")
    with pytest.raises(ConfigError, match="port from 1 to 65535"):
        listen_address("127.0.0.1:\u00b2")  # a digit to str.isdigit(), none to int()


def test_a_client_count_in_other_digits_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A superscript two passed str.isdigit(), then int() raised; Arabic-Indic digits matched
    the range's \\d and were read as 1..3."""
    assert main(["sweep", "--clients", "\u00b2", "--endpoint", "http://127.0.0.1:1"]) == 2
    assert "invalid client count" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="invalid client count"):
        parse_client_range("\u0661..\u0663")


def test_an_agent_listens_on_an_ipv6_address() -> None:
    """``[::1]:PORT`` as the gateway takes it: the agent's own reading kept the brackets."""
    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "s3kv.cli", "agent", "--listen",
                             f"[::1]:{port}"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening" in line, line + proc.stdout.read()
        with socket.create_connection(("::1", port), timeout=5):
            pass
    finally:
        proc.kill()
        proc.wait()


def test_serve_without_backend_credentials_says_which_to_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3KV_"))}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_EC2_METADATA_DISABLED="true")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "s3kv.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--store", "s3://kv/p/?endpoint=http://127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("s3kv serve: error: "), last
    assert "no credentials for the S3 backend: set AWS_ACCESS_KEY_ID and " in last, last


def test_serve_refuses_a_directory_that_is_not_a_store(tmp_path: Path) -> None:
    data = tmp_path / "photos"
    (data / "2024").mkdir(parents=True)
    (data / "notes.txt").write_text("mine\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "s3kv.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--store", f"file://{data}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"s3kv serve: error: store directory {data} is not empty and is not an "
                    "s3kv store (it holds 2024, notes.txt): give a new or empty directory, or "
                    "the directory of an existing s3kv store"), last
    assert sorted(p.name for p in data.iterdir()) == ["2024", "notes.txt"]  # nothing written


@pytest.mark.parametrize("entries", [[], ["lost+found"], [".uploads", "README"],
                                     ["segments", "manifests", "operator-notes.txt"]])
def test_a_new_empty_or_existing_store_directory_opens(tmp_path: Path,
                                                       entries: list[str]) -> None:
    for name in entries:
        (tmp_path / name).mkdir()

    async def open_and_close() -> None:
        backend = await FileBackend(tmp_path, fsync=False).open()
        await backend.close()

    asyncio.run(open_and_close())
    assert (tmp_path / ".uploads").is_dir()


def test_help_gives_the_defaults_a_run_uses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    local, remote = LOCAL_PROFILE, WARP_PROFILE
    assert (f"(default {remote.trim:g}s as Warp with --endpoint, {local.trim:g}s locally)"
            in text)
    assert (f"(default {remote.duration:g}s with --endpoint, {local.duration:g}s locally)"
            in text)


@pytest.mark.parametrize(("argv", "message"), [
    (["sweep", "--duration", "0"], "--duration must be positive"),
    (["bench", "put", "--duration", "0s"], "--duration must be positive"),
    (["bench", "get", "--retries", "-1"], "--retries must be 0 or more"),
    (["sweep", "--ops", ","], "--ops names no operation"),
])
def test_a_run_that_would_measure_nothing_is_refused(argv: list[str], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*argv, "--endpoint", "http://127.0.0.1:1", "--clients", "1"]
                if argv[0] == "sweep" else [*argv, "--endpoint", "http://127.0.0.1:1"])
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["sweep", "--clients", "1", "--duration", "0"], "--duration must be positive"),
    (["sweep", "--clients", "1", "--trim", "99"], "leaves less than one 1 s bucket"),
    (["bench", "get", "--objects", "0"], "--objects, --batch and parts in flight"),
])
def test_bad_flags_are_refused_before_a_local_server_starts(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "started a local S3 server" not in err


def test_a_trim_that_leaves_no_bucket_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Warp's default trim (2 s at each end) on a 4 s phase measured nothing: a table of "-"."""
    code = main(["sweep", "--clients", "1", "--endpoint", "http://127.0.0.1:1", "--duration",
                 "4s"])
    assert code == 2
    assert ("--trim 2s at each end of a 4 s phase leaves less than one 1 s bucket to measure"
            in capsys.readouterr().err)


def test_tune_names_an_endpoint_without_a_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["tune", "--endpoint", "minio1:9000", "--bucket", "b", "--budget", "1"])
    assert code == 2
    assert ("s3kv tune: error: endpoint 'minio1:9000' must start with http:// or https://"
            in capsys.readouterr().err)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("as_json", [False, True])
def test_a_progress_bar_on_a_terminal_but_not_with_json(
        s3_server: Any, bucket: str, tmp_path: Path, as_json: bool,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code = main(["bench", "put", "--endpoint", s3_server.endpoint, "--bucket", bucket,
                 "--obj-size", "4KiB", "--concurrent", "1", "--duration", "1s", "--trim", "0",
                 "--benchdata", str(tmp_path / "put.csv.zst"), *(["--json"] if as_json else [])])
    assert code == 0
    assert ("put c=1" in terminal.getvalue()) is not as_json, terminal.getvalue()
    if as_json:
        json.loads(capsys.readouterr().out)


def _with_json_on_a_terminal(argv: list[str], monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run ``s3kv ARGV --json`` with stderr a terminal: its exit code and what went to the
    terminal; stdout must be one JSON document."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code = main([*argv, "--json"])
    json.loads(capsys.readouterr().out)
    return code, terminal.getvalue()


def test_tune_json_shows_no_progress_bar(s3_server: Any, bucket: str,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, shown = _with_json_on_a_terminal(
        ["tune", "--endpoint", s3_server.endpoint, "--bucket", bucket, "--budget", "1",
         "--segment-sizes", "5MiB", "--part-sizes", "5MiB", "--concurrency", "1",
         "--block-size", "256KiB"], monkeypatch, capsys)
    assert "tune" not in shown, shown


def test_bench_kv_json_shows_no_progress_bar(s3_server: Any, bucket: str,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, shown = _with_json_on_a_terminal(
        ["bench", "kv", "--target", f"s3://{bucket}/kv?endpoint={s3_server.endpoint}",
         "--bytes-per-token", "1KiB", "--block-tokens", "16", "--context-tokens", "160",
         "--system-prompt-tokens", "16", "--users", "1", "--duration", "1s"],
        monkeypatch, capsys)
    assert code == 0
    assert "pass 1" not in shown, shown


def test_analyze_refuses_a_bucket_of_no_length(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    records = tmp_path / "put.csv.zst"
    t0 = 1_700_000_000 * 10**9
    write_records(records, [Record("PUT", 0, "c1", "http://s3", f"k{i}", 4096,
                                   t0 + i * 10**8, t0 + i * 10**8 + 5 * 10**7)
                            for i in range(50)])
    assert main(["analyze", "--bucket-duration", "0", str(records)]) == 2
    assert ("s3kv analyze: error: --bucket-duration must be positive"
            in capsys.readouterr().err)


def test_an_unlistable_store_directory_is_reported_not_raised(tmp_path: Path) -> None:
    store = tmp_path / ("n" * 300)  # ENAMETOOLONG: listing it fails whoever runs the test

    async def open_it() -> None:
        await FileBackend(store, fsync=False).open()

    with pytest.raises(BackendError, match="cannot create store directory"):
        asyncio.run(open_it())
