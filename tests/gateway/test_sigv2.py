"""Signature V2 against a running gateway, signed by tools nobody here wrote: boto3's default
presigned URLs (SigV2), botocore's HmacV1Auth / HmacV1QueryAuth signers, and s3cmd
``--signature-v2``. The same credential table, namespace restrictions and expiry rules as
SigV4 apply."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.auth import HmacV1Auth, HmacV1QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.gateway.badinput import Reply, send
from tests.gateway.conftest import (
    DOMAIN,
    GW_ACCESS,
    GW_SECRET,
    SMALL,
    Gateway,
    backend_store,
    gateway_client,
    running_gateway,
)
from tests.support.s3server import REGION, MotoServer

TEAM_ACCESS, TEAM_SECRET = "team-a", "team-a-secret/+="
CREDENTIALS = f'''
[[credential]]
access_key = "{TEAM_ACCESS}"
secret_key = "{TEAM_SECRET}"
namespaces = ["team-a-*"]
'''


@pytest.fixture(scope="module")
def gateway(s3_server: MotoServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Gateway]:
    """Blocks up to 8 MiB (s3cmd's multipart needs 5 MiB parts) and a restricted credential."""
    creds = tmp_path_factory.mktemp("v2creds") / "credentials.toml"
    creds.write_text(CREDENTIALS)
    args = [*SMALL, "--segment-size", "20MiB", "--max-block-size", "8MiB", "--domain", DOMAIN,
            "--credentials-file", str(creds)]
    with running_gateway(backend_store(s3_server), args) as gw:
        yield gw


def default_client(endpoint: str, access: str = GW_ACCESS, secret: str = GW_SECRET) -> Any:
    """boto3 as a user configures it: no signature_version (its presigner then makes SigV2)."""
    return boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                        aws_access_key_id=access, aws_secret_access_key=secret,
                        config=Config(s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))


def fetch(url: str, method: str = "GET", data: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def code_of(body: bytes) -> str:
    text = body.decode(errors="replace")
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""


def v2_signed(method: str, url: str, *, body: bytes = b"", access: str = GW_ACCESS,
              secret: str = GW_SECRET, headers: dict[str, str] | None = None,
              signer: type[HmacV1Auth] = HmacV1Auth) -> Reply:
    req = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    signer(Credentials(access, secret)).add_auth(req)
    return send(method, url, body=body, headers=dict(req.headers.items()))


@pytest.fixture
def bucket(gateway: Gateway) -> str:
    name = f"b-{uuid.uuid4().hex[:12]}"
    gateway_client(gateway.endpoint).create_bucket(Bucket=name)
    return name


def test_boto3_default_presigned_urls_are_sigv2_and_work(gateway: Gateway, bucket: str
                                                          ) -> None:
    s3 = default_client(gateway.endpoint)
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "p/k"},
                                        ExpiresIn=300)
    assert "AWSAccessKeyId=" in put_url and "X-Amz-Algorithm" not in put_url
    # urllib would add Content-Type: application/x-www-form-urlencoded, which SigV2 signs
    got = fetch(put_url, "PUT", b"presigned v2 body", {"Content-Type": ""})
    assert got[0] == 200, got
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p/k"},
                                        ExpiresIn=300)
    assert fetch(get_url) == (200, b"presigned v2 body")
    # a subresource is part of the signed resource: response-* overrides and versionId=null
    url = s3.generate_presigned_url("get_object", Params={
        "Bucket": bucket, "Key": "p/k", "ResponseCacheControl": "no-cache",
        "VersionId": "null"}, ExpiresIn=300)
    assert fetch(url) == (200, b"presigned v2 body")
    # tampering with the path, the method or the expiry breaks the signature
    assert code_of(fetch(get_url.replace("/p/k", "/p/x"))[1]) == "SignatureDoesNotMatch"
    assert fetch(get_url, "DELETE")[0] == 403
    expires = get_url.split("Expires=", 1)[1].split("&", 1)[0]
    bumped = get_url.replace(f"Expires={expires}", f"Expires={int(expires) + 60}")
    assert code_of(fetch(bumped)[1]) == "SignatureDoesNotMatch"
    # SigV4 presigned URLs keep working beside them
    v4 = gateway_client(gateway.endpoint).generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "p/k"}, ExpiresIn=300)
    assert "X-Amz-Signature=" in v4 and fetch(v4) == (200, b"presigned v2 body")


def test_v2_presigned_expiry(gateway: Gateway, bucket: str) -> None:
    gateway_client(gateway.endpoint).put_object(Bucket=bucket, Key="k", Body=b"x")
    url = f"{gateway.endpoint}/{bucket}/k"
    for expires, status, code in [(-30, 403, "AccessDenied"),
                                  (8 * 24 * 3600, 400, "AuthorizationQueryParametersError")]:
        req = AWSRequest(method="GET", url=url)
        HmacV1QueryAuth(Credentials(GW_ACCESS, GW_SECRET), expires=expires).add_auth(req)
        got = fetch(req.url)
        assert (got[0], code_of(got[1])) == (status, code), got


def test_v2_header_auth_botocore_signer(gateway: Gateway, bucket: str) -> None:
    base = f"{gateway.endpoint}/{bucket}"
    r = v2_signed("PUT", f"{base}/dir/a%20b%2Bc", body=b"hello v2",
                  headers={"Content-Type": "text/plain", "x-amz-meta-who": "v2"})
    assert r.status == 200, r.body
    r = v2_signed("GET", f"{base}/dir/a%20b%2Bc")
    assert (r.status, r.body) == (200, b"hello v2")
    r = v2_signed("GET", f"{base}?list-type=2&prefix=dir/")
    assert r.status == 200 and b"<Key>dir/a b+c</Key>" in r.body
    r = v2_signed("GET", f"{base}?prefix=dir/&marker=")  # ListObjects v1
    assert r.status == 200 and b"<Marker></Marker>" in r.body
    r = v2_signed("GET", f"{base}?acl")  # a subresource in the signed resource: verified
    assert r.status == 200 and b"<AccessControlPolicy" in r.body, r.body
    r = v2_signed("PUT", f"{base}?acl", headers={"x-amz-acl": "private"})  # then refused
    assert (r.status, r.code) == (501, "NotImplemented")
    r = v2_signed("DELETE", f"{base}/dir/a%20b%2Bc")
    assert r.status == 204
    assert v2_signed("GET", f"{base}/dir/a%20b%2Bc").status == 404


def test_v2_empty_subresource_values_are_signed_bare(gateway: Gateway, bucket: str) -> None:
    """rclone (``v2_auth``, Go's url.Values) sends ``?uploads=`` and ``?delete=`` and signs the
    subresource bare, as S3 does for a subresource without a value: its multipart uploads and
    DeleteObjects (purge) verify."""
    base = f"{gateway.endpoint}/{bucket}"

    def sent_with_equals(method: str, signed_url: str, body: bytes = b"",
                         headers: dict[str, str] | None = None) -> Reply:
        req = AWSRequest(method=method, url=signed_url, data=body, headers=dict(headers or {}))
        HmacV1Auth(Credentials(GW_ACCESS, GW_SECRET)).add_auth(req)
        return send(method, signed_url.replace("?uploads", "?uploads=").replace(
            "?delete", "?delete="), body=body, headers=dict(req.headers.items()))

    r = sent_with_equals("POST", f"{base}/mp?uploads")
    assert r.status == 200 and b"<UploadId>" in r.body, r.body
    assert v2_signed("PUT", f"{base}/gone", body=b"x").status == 200
    doc = b"<Delete><Object><Key>gone</Key></Object></Delete>"
    md5 = base64.b64encode(hashlib.md5(doc).digest()).decode()
    r = sent_with_equals("POST", f"{base}?delete", body=doc, headers={"Content-MD5": md5})
    assert r.status == 200 and b"<Deleted><Key>gone</Key>" in r.body, r.body
    assert v2_signed("GET", f"{base}/gone").status == 404


def test_v2_bucket_operations_of_botocores_client(gateway: Gateway) -> None:
    """boto3 (and s3fs through aiobotocore) with ``signature_version="s3"`` sign a path-style
    bucket's operations (``/bucket``) as ``/bucket/``: they verify."""
    s3 = boto3.client("s3", endpoint_url=gateway.endpoint, region_name=REGION,
                      aws_access_key_id=GW_ACCESS, aws_secret_access_key=GW_SECRET,
                      config=Config(signature_version="s3", s3={"addressing_style": "path"},
                                    retries={"max_attempts": 1}))
    name = f"b-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    s3.head_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="k", Body=b"v2")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=name)["Contents"]] == ["k"]
    assert s3.get_bucket_location(Bucket=name)["LocationConstraint"] in (None, "us-east-1")
    s3.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "k"}]})
    s3.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as exc:
        s3.head_bucket(Bucket=name)
    assert exc.value.response["Error"]["Code"] in ("404", "NoSuchBucket")


def test_v2_virtual_hosted_style(gateway: Gateway, bucket: str) -> None:
    """A virtual-hosted request signs /bucket/key (the bucket from the Host header)."""
    gateway_client(gateway.endpoint).put_object(Bucket=bucket, Key="vk", Body=b"vhost")
    url = f"{gateway.endpoint}/vk"
    req = AWSRequest(method="GET", url=url, headers={"Host": f"{bucket}.{DOMAIN}"})
    req.auth_path = f"/{bucket}/vk"
    HmacV1Auth(Credentials(GW_ACCESS, GW_SECRET)).add_auth(req)
    r = send("GET", url, headers=dict(req.headers.items()))
    assert (r.status, r.body) == (200, b"vhost")


class _OldDate(HmacV1Auth):  # type: ignore[misc]
    """botocore's v2 signer with a Date 20 minutes in the past."""

    def _get_date(self) -> str:
        return email.utils.formatdate(time.time() - 1200, usegmt=True)


def test_v2_header_auth_errors(gateway: Gateway, bucket: str) -> None:
    url = f"{gateway.endpoint}/{bucket}/e"
    r = v2_signed("PUT", url, body=b"x", secret="wrong")
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch")
    r = v2_signed("PUT", url, body=b"x", access="nobody")
    assert (r.status, r.code) == (403, "InvalidAccessKeyId")
    r = v2_signed("PUT", url, body=b"x", signer=_OldDate)
    assert (r.status, r.code) == (403, "RequestTimeTooSkewed")
    r = send("PUT", url, body=b"x", headers={"Authorization": "AWS nocolon",
                                              "Date": email.utils.formatdate(usegmt=True)})
    assert (r.status, r.code) == (400, "AuthorizationHeaderMalformed")
    assert v2_signed("GET", url).status == 404  # nothing was stored


def test_v2_date_past_the_calendar(gateway: Gateway, bucket: str) -> None:
    """A Date whose offset puts it past year 9999 in UTC (``Tue, 31 Dec 9999 23:59:59 -2359``:
    parsed, then OverflowError) is no valid date, 403 AccessDenied; it was a 500."""
    url = f"{gateway.endpoint}/{bucket}/e"
    r = send("PUT", url, body=b"x", headers={"Authorization": f"AWS {GW_ACCESS}:c2ln",
                                              "Date": "Tue, 31 Dec 9999 23:59:59 -2359"})
    assert (r.status, r.code) == (403, "AccessDenied"), r.body
    assert v2_signed("GET", url).status == 404  # nothing was stored


def test_v2_namespace_restrictions(gateway: Gateway, bucket: str) -> None:
    """A restricted credential signing SigV2 gets the same 403 as with SigV4 outside its
    namespaces, whether the bucket exists or not; inside them it works."""
    own = f"team-a-{uuid.uuid4().hex[:8]}"
    r = v2_signed("PUT", f"{gateway.endpoint}/{own}", access=TEAM_ACCESS, secret=TEAM_SECRET)
    assert r.status == 200, r.body
    r = v2_signed("PUT", f"{gateway.endpoint}/{own}/k", body=b"mine", access=TEAM_ACCESS,
                  secret=TEAM_SECRET)
    assert r.status == 200
    for other in (bucket, "no-such-bucket-anywhere"):
        r = v2_signed("GET", f"{gateway.endpoint}/{other}/k", access=TEAM_ACCESS,
                      secret=TEAM_SECRET)
        assert (r.status, r.code) == (403, "AccessDenied")
    team = default_client(gateway.endpoint, TEAM_ACCESS, TEAM_SECRET)
    url = team.generate_presigned_url("get_object", Params={"Bucket": own, "Key": "k"})
    assert fetch(url) == (200, b"mine")
    url = team.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    assert code_of(fetch(url)[1]) == "AccessDenied"
    r = v2_signed("GET", f"{gateway.endpoint}/", access=TEAM_ACCESS, secret=TEAM_SECRET)
    assert own.encode() in r.body and bucket.encode() not in r.body


# -- s3cmd --signature-v2 ----------------------------------------------------------------------

def s3cmd(gateway: Gateway, cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("s3cmd")
    return subprocess.run([str(exe), "-c", str(cfg), "--signature-v2", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def s3cmd_cfg(gateway: Gateway, tmp_path: Path) -> Path:
    host = f"127.0.0.1:{gateway.port}"
    cfg = tmp_path / "s3cfg"
    cfg.write_text(f"[default]\naccess_key = {GW_ACCESS}\nsecret_key = {GW_SECRET}\n"
                   f"host_base = {host}\nhost_bucket = {host}\nuse_https = False\n"
                   "signature_v2 = True\nbucket_location = us-east-1\n")
    return cfg


def test_s3cmd_signature_v2(gateway: Gateway, s3cmd_cfg: Path, tmp_path: Path) -> None:
    name = f"s3cmd-{uuid.uuid4().hex[:8]}"
    ok = s3cmd(gateway, s3cmd_cfg, "mb", f"s3://{name}")
    assert ok.returncode == 0, ok.stderr
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(6 * 1024 * 1024))  # multipart: ?uploads, ?partNumber&uploadId
    put = s3cmd(gateway, s3cmd_cfg, "put", "--multipart-chunk-size-mb=5", str(big),
                f"s3://{name}/dir/big.bin")
    assert put.returncode == 0, put.stderr
    s3 = gateway_client(gateway.endpoint)
    s3.put_object(Bucket=name, Key="dir/small.txt", Body=b"small")
    s3.put_object(Bucket=name, Key="top.txt", Body=b"top")
    ls = s3cmd(gateway, s3cmd_cfg, "ls", f"s3://{name}")
    assert ls.returncode == 0, ls.stderr
    assert f"s3://{name}/dir/" in ls.stdout and f"s3://{name}/top.txt" in ls.stdout
    la = s3cmd(gateway, s3cmd_cfg, "ls", "--recursive", f"s3://{name}")
    assert la.returncode == 0, la.stderr
    for key in ("dir/big.bin", "dir/small.txt", "top.txt"):
        assert f"s3://{name}/{key}" in la.stdout
    buckets = s3cmd(gateway, s3cmd_cfg, "ls")
    assert f"s3://{name}" in buckets.stdout
    out = tmp_path / "back.bin"
    got = s3cmd(gateway, s3cmd_cfg, "get", f"s3://{name}/dir/big.bin", str(out))
    assert got.returncode == 0, got.stderr
    assert out.read_bytes() == big.read_bytes()
    rm = s3cmd(gateway, s3cmd_cfg, "del", f"s3://{name}/top.txt")
    assert rm.returncode == 0, rm.stderr
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=name)["Contents"]] == [
        "dir/big.bin", "dir/small.txt"]


def test_v2_presigned_headers_in_the_query_must_be_sent(gateway: Gateway, bucket: str) -> None:
    """botocore's v2 presigner copies Content-Type and x-amz-* into the query; they are signed
    as headers, so a request that does not send them is refused (not stored without them)."""
    s3 = default_client(gateway.endpoint)
    url = s3.generate_presigned_url("put_object", Params={
        "Bucket": bucket, "Key": "typed", "ContentType": "text/plain",
        "Metadata": {"who": "v2"}}, ExpiresIn=300)
    assert "content-type=text%2Fplain" in url and "x-amz-meta-who=v2" in url
    got = fetch(url, "PUT", b"typed body", {"Content-Type": "text/plain"})
    assert (got[0], code_of(got[1])) == (400, "InvalidArgument")  # x-amz-meta-who missing
    got = fetch(url, "PUT", b"typed body", {"Content-Type": "text/csv", "x-amz-meta-who": "v2"})
    assert (got[0], code_of(got[1])) == (400, "InvalidArgument")  # another Content-Type
    assert fetch(f"{gateway.endpoint}/{bucket}/typed")[0] == 403  # (unsigned) ...
    s3v4 = gateway_client(gateway.endpoint)
    assert s3v4.list_objects_v2(Bucket=bucket)["KeyCount"] == 0  # ... and nothing stored
    got = fetch(url, "PUT", b"typed body", {"Content-Type": "text/plain", "x-amz-meta-who": "v2"})
    assert got[0] == 200, got
    assert s3v4.get_object(Bucket=bucket, Key="typed")["Body"].read() == b"typed body"
