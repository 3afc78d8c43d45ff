"""`s3kv doctor` against a real S3 server process on loopback (moto's standalone server).

moto accepts any credentials unless its IAM authentication is switched on, so the wrong-credential
tests start a server of their own with ``INITIAL_NO_AUTH_ACTION_COUNT`` set: the first three
requests (create an IAM user, its access key, its policy) pass unauthenticated, every later
request must be signed with a key moto knows, and a wrong secret gets SignatureDoesNotMatch.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from s3kv.cli import main
from s3kv.doctor import FAIL, OK, SKIP, WARN, Target, run_checks
from tests.support.s3server import REGION, MotoServer, free_port


def _doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def _status(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


def _check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def test_setup_then_every_check_passes(s3_server: MotoServer, s3_client: Any,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    name = f"doc-{uuid.uuid4().hex[:12]}"
    code, report = _doctor(capsys, "--setup", "--expire-days", "7", "--endpoint",
                           s3_server.endpoint, "--bucket", name, "--prefix", "kv/")
    assert code == 0, report
    status = _status(report)
    assert status.pop("cluster") == SKIP  # moto is not MinIO: no /minio/health/cluster
    assert set(status.values()) == {OK}, report
    for name_ in ("reachable", "clock", "credentials", "bucket", "multipart", "ranged-get",
                  "setup-bucket", "setup-lifecycle", "lifecycle", "versioning"):
        assert name_ in status
    # the lifecycle rules really are on the bucket, scoped to the prefix
    rules = s3_client.get_bucket_lifecycle_configuration(Bucket=name)["Rules"]
    by_id = {r["ID"]: r for r in rules}
    assert by_id["s3kv-expire"]["Expiration"]["Days"] == 7
    assert by_id["s3kv-abort-incomplete-multipart"]["AbortIncompleteMultipartUpload"][
        "DaysAfterInitiation"] == 1
    assert all(r["Filter"]["Prefix"] == "kv/" for r in rules)
    # the checks cleaned up after themselves: no object, no open upload
    assert s3_client.list_objects_v2(Bucket=name).get("KeyCount", 0) == 0
    assert not s3_client.list_multipart_uploads(Bucket=name).get("Uploads")


def test_setup_is_idempotent_and_keeps_foreign_rules(s3_server: MotoServer, s3_client: Any,
                                                     bucket: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    s3_client.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={
        "Rules": [{"ID": "someone-else", "Status": "Enabled", "Filter": {"Prefix": "logs/"},
                   "Expiration": {"Days": 3}}]})
    for _ in range(2):
        code, report = _doctor(capsys, "--setup", "--endpoint", s3_server.endpoint,
                               "--bucket", bucket)
        assert code == 0, report
    ids = sorted(r["ID"] for r in
                 s3_client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"])
    # no --expire-days: only the abort rule is s3kv's; the other owner's rule survives
    assert ids == ["s3kv-abort-incomplete-multipart", "someone-else"]
    assert "already exists" in _check(report, "setup-bucket")["detail"]


def test_existing_bucket_without_rules_passes_with_a_warning(
        s3_server: MotoServer, bucket: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _doctor(capsys, "--endpoint", s3_server.endpoint, "--bucket", bucket)
    assert code == 0, report
    lifecycle = _check(report, "lifecycle")
    assert lifecycle["status"] == WARN
    assert "--setup" in lifecycle["fix"]


def test_text_output_names_each_check(s3_server: MotoServer, bucket: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--endpoint", s3_server.endpoint, "--bucket", bucket]) == 0
    out = capsys.readouterr().out
    for line in ("OK    reachable", "OK    credentials", "OK    multipart", "OK    ranged-get",
                 "OK    clock"):
        assert line in out, out


def test_store_url_from_environment(s3_server: MotoServer, bucket: str,
                                    monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Inside a gateway pod, `s3kv doctor` alone checks the gateway's own backend."""
    monkeypatch.setenv("S3KV_STORE", f"s3://{bucket}/kv/?endpoint={s3_server.endpoint}")
    code, report = _doctor(capsys)
    assert code == 0, report
    assert report["bucket"] == bucket and report["prefix"] == "kv/"


def test_missing_bucket_fails_and_says_how_to_create_it(
        s3_server: MotoServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _doctor(capsys, "--endpoint", s3_server.endpoint, "--bucket", "no-such-bkt")
    assert code == 1
    chk = _check(report, "bucket")
    assert chk["status"] == FAIL and "does not exist" in chk["detail"]
    assert "s3kv doctor --setup" in chk["fix"]
    assert _status(report)["multipart"] == SKIP


def test_closed_port_fails_with_an_actionable_message(
        capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # bound and released: nothing listens there now
    start = time.monotonic()
    code = main(["doctor", "--endpoint", f"http://127.0.0.1:{port}", "--bucket", "any-bucket"])
    out = capsys.readouterr().out
    assert code == 1
    assert time.monotonic() - start < 10
    assert f"FAIL  reachable    connection refused: nothing listens on 127.0.0.1:{port}" in out
    assert "fix: check the port in --endpoint" in out
    assert "SKIP  credentials" in out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("S3KV_STORE", raising=False)
    assert main(["doctor", "--bucket", "b-b-b"]) == 2
    assert "no endpoint" in capsys.readouterr().err
    assert main(["doctor", "--endpoint", "http://h:9000/path", "--bucket", "bbb"]) == 2
    assert "no path" in capsys.readouterr().err
    assert main(["doctor", "--store", "file:///tmp/x"]) == 2
    for bad in ("kv", "Upper-Case", "a..b"):  # the S3 SDK raised ValueError: a traceback
        assert main(["doctor", "--endpoint", "http://127.0.0.1:1", "--bucket", bad]) == 2
        assert "is no valid S3 bucket name" in capsys.readouterr().err


def test_clock_skew_fails_beyond_the_limit(s3_server: MotoServer, bucket: str) -> None:
    target = Target(endpoints=[s3_server.endpoint], bucket=bucket, access_key="testing",
                    secret_key="testing", credentials_from="test")
    report = run_checks(target, now=lambda: time.time() + 120)  # this host 2 minutes ahead
    clock = next(c for c in report.checks if c.name == "clock")
    assert clock.status == FAIL and "behind this host" in clock.detail
    assert "NTP" in clock.fix
    assert not report.ok
    far = run_checks(target, now=lambda: time.time() - 3600)
    clock = next(c for c in far.checks if c.name == "clock")
    assert clock.status == FAIL and "RequestTimeTooSkewed" in clock.detail


# ---- wrong credentials: a moto server with IAM authentication on ------------------------------

@pytest.fixture(scope="module")
def auth_server() -> Iterator[tuple[MotoServer, str, str]]:
    mp = pytest.MonkeyPatch()
    mp.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "3")
    server = MotoServer()
    try:
        server.start()
    finally:
        mp.undo()
    try:
        iam = boto3.client("iam", endpoint_url=server.endpoint, region_name=REGION,
                           aws_access_key_id="testing", aws_secret_access_key="testing")
        iam.create_user(UserName="s3kv")
        key = iam.create_access_key(UserName="s3kv")["AccessKey"]
        iam.put_user_policy(UserName="s3kv", PolicyName="all", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        yield server, key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        server.stop()


def test_auth_server_accepts_the_right_keys(auth_server: tuple[MotoServer, str, str],
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    server, access, secret = auth_server
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    code, report = _doctor(capsys, "--setup", "--endpoint", server.endpoint, "--bucket",
                           "auth-bucket")
    assert code == 0, report


def test_wrong_secret_fails_with_an_actionable_message(
        auth_server: tuple[MotoServer, str, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    server, access, _ = auth_server
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    code, report = _doctor(capsys, "--endpoint", server.endpoint, "--bucket", "auth-bucket")
    assert code == 1
    chk = _check(report, "credentials")
    assert chk["status"] == FAIL
    assert chk["detail"] == f"the secret key does not match the access key {access}"
    assert "AWS_SECRET_ACCESS_KEY" in chk["fix"]
    assert _status(report)["bucket"] == SKIP


def test_unknown_access_key_fails_with_an_actionable_message(
        auth_server: tuple[MotoServer, str, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    server, _, secret = auth_server
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNKEY000000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    assert main(["doctor", "--endpoint", server.endpoint, "--bucket", "auth-bucket"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  credentials  the server does not know the access key AKIAUNKNOWNKEY000000" in out
    assert "fix: set AWS_ACCESS_KEY_ID" in out


def test_no_credentials_at_all(s3_server: MotoServer, monkeypatch: pytest.MonkeyPatch,
                               tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    code, report = _doctor(capsys, "--endpoint", s3_server.endpoint, "--bucket", "bbb")
    assert code == 1
    assert _check(report, "credentials")["detail"] == "no credentials found"


def test_credentials_from_a_profile(s3_server: MotoServer, bucket: str, tmp_path: Any,
                                    monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    creds = tmp_path / "credentials"
    creds.write_text("[ops]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    code, report = _doctor(capsys, "--profile", "ops", "--endpoint", s3_server.endpoint,
                           "--bucket", bucket)
    assert code == 0, report
    assert report["credentials_from"].startswith("profile ops")
