"""Bad input against a running gateway: each a clear S3 error code and status, never a 500, and
nothing half-written becomes readable afterwards."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.gateway.conftest import GW_ACCESS, GW_SECRET, MAX_BLOCK, Gateway, gateway_client
from tests.support.clock import EXPIRED_BY, botocore_signs_earlier
from tests.support.s3server import REGION


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def code(self) -> str:
        text = self.body.decode(errors="replace")
        if "<Code>" not in text:
            return ""
        return text.split("<Code>", 1)[1].split("</Code>", 1)[0]


def signed_headers(method: str, url: str, *, body: bytes = b"", headers: dict[str, str] | None
                   = None, secret: str = GW_SECRET, payload_hash: str | None = None,
                   host: str | None = None) -> dict[str, str]:
    """Headers of a request signed as botocore signs it (SigV4, header auth)."""
    hdrs = dict(headers or {})
    if host is not None:
        hdrs["Host"] = host
    req = AWSRequest(method=method, url=url, data=body, headers=hdrs)
    _Signer(Credentials(GW_ACCESS, secret), payload_hash).add_auth(req)
    return dict(req.headers.items())


class _Signer(S3SigV4Auth):  # type: ignore[misc]
    """botocore's S3 signer with the x-amz-content-sha256 value of our choosing (None: the
    real SHA-256 of the body), so a test can sign UNSIGNED-PAYLOAD or a wrong digest."""

    def __init__(self, creds: Credentials, payload_hash: str | None) -> None:
        super().__init__(creds, "s3", REGION)
        self._payload_hash = payload_hash

    def payload(self, request: AWSRequest) -> str:
        if self._payload_hash is not None:
            return self._payload_hash
        return str(super().payload(request))


def send(method: str, url: str, *, body: bytes = b"", headers: dict[str, str] | None = None
         ) -> Reply:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        hdrs = dict(headers or {})
        conn.putrequest(method, path, skip_host="Host" in hdrs, skip_accept_encoding=True)
        for k, v in hdrs.items():
            conn.putheader(k, v)
        if body and "Content-Length" not in hdrs:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body or None)
        resp = conn.getresponse()
        return Reply(resp.status, dict(resp.getheaders()), resp.read())
    finally:
        conn.close()


def signed(method: str, url: str, *, body: bytes = b"", headers: dict[str, str] | None = None,
           secret: str = GW_SECRET) -> Reply:
    return send(method, url, body=body,
                headers=signed_headers(method, url, body=body, headers=headers, secret=secret))


def assert_absent(gateway: Gateway, bucket: str, key: str) -> None:
    """The key is neither readable nor listed."""
    url = f"{gateway.endpoint}/{bucket}/{quote(key, safe='/')}"
    r = signed("GET", url)
    assert (r.status, r.code) == (404, "NoSuchKey"), r.body[:300]
    s3 = gateway_client(gateway.endpoint)
    listed = s3.list_objects_v2(Bucket=bucket)
    assert key not in [o["Key"] for o in listed.get("Contents", [])]


def assert_healthy(gateway: Gateway) -> None:
    with urllib.request.urlopen(gateway.endpoint + "/healthz", timeout=5) as resp:
        assert resp.status == 200
    assert gateway.proc is not None and gateway.proc.poll() is None


def server_errors(gateway: Gateway) -> dict[str, float]:
    """The gateway's request counters of 5xx answers other than 503, by series."""
    text = urllib.request.urlopen(gateway.endpoint + "/metrics").read().decode()
    return {series: float(count) for series, _, count in (
        line.rpartition(" ") for line in text.splitlines()
        if line.startswith("s3kv_requests_total{") and 'status="5' in line
        and 'status="503"' not in line)}


@pytest.fixture(autouse=True)
def _no_500(gateway: Gateway) -> Any:
    """During every test here: the gateway answered no request with a 5xx (other than 503).
    Counted as the test's own increase: the gateway is shared with other modules, some of
    which provoke 501s on purpose."""
    before = server_errors(gateway)
    yield
    bad = {series: count for series, count in server_errors(gateway).items()
           if count > before.get(series, 0.0)}
    assert not bad, bad


# ---- authentication ------------------------------------------------------------------------
def test_wrong_secret(gateway: Gateway, gw_bucket: str) -> None:
    bad = gateway_client(gateway.endpoint, secret="not-the-secret")
    with pytest.raises(bad.exceptions.ClientError) as exc:
        bad.put_object(Bucket=gw_bucket, Key="w/1", Body=b"data")
    err = exc.value.response
    assert err["Error"]["Code"] == "SignatureDoesNotMatch"
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(bad.exceptions.ClientError) as exc:
        bad.list_objects_v2(Bucket=gw_bucket)
    assert exc.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert_absent(gateway, gw_bucket, "w/1")


def test_unknown_access_key(gateway: Gateway, gw_bucket: str) -> None:
    url = f"{gateway.endpoint}/{gw_bucket}/x"
    hdrs = signed_headers("GET", url)
    hdrs["Authorization"] = hdrs["Authorization"].replace(GW_ACCESS, "AKIAUNKNOWN000", 1)
    r = send("GET", url, headers=hdrs)
    assert (r.status, r.code) == (403, "InvalidAccessKeyId")


def test_tampered_signature(gateway: Gateway, gw_bucket: str) -> None:
    url = f"{gateway.endpoint}/{gw_bucket}/t/1"
    body = b"payload"
    hdrs = signed_headers("PUT", url, body=body)
    auth = hdrs["Authorization"]
    last = auth[-1]
    hdrs["Authorization"] = auth[:-1] + ("0" if last != "0" else "1")
    r = send("PUT", url, body=body, headers=hdrs)
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch")
    # a valid signature replayed on another key
    hdrs = signed_headers("PUT", url, body=body)
    r = send("PUT", url.replace("/t/1", "/t/2"), body=body, headers=hdrs)
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch")
    # a signed header changed after signing
    hdrs = signed_headers("PUT", url, body=body, headers={"x-s3kv-durability": "memory"})
    hdrs["x-s3kv-durability"] = "sealed"
    r = send("PUT", url, body=body, headers=hdrs)
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch")
    # a presigned URL whose signature was altered
    s3 = gateway_client(gateway.endpoint)
    s3.put_object(Bucket=gw_bucket, Key="t/p", Body=b"presigned")
    purl = s3.generate_presigned_url("get_object", Params={"Bucket": gw_bucket, "Key": "t/p"},
                                     ExpiresIn=60)
    sig = purl.rsplit("X-Amz-Signature=", 1)[1][:64]
    evil = purl.replace(sig, sig[::-1])
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(evil, timeout=10)
    assert exc.value.code == 403
    assert b"<Code>SignatureDoesNotMatch</Code>" in exc.value.read()
    assert_absent(gateway, gw_bucket, "t/1")
    assert_absent(gateway, gw_bucket, "t/2")


def test_expired_presigned_put(gateway: Gateway, gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    with botocore_signs_earlier(EXPIRED_BY + 1):  # valid for 1 s, EXPIRED_BY s ago
        url = s3.generate_presigned_url("put_object", Params={"Bucket": gw_bucket,
                                                              "Key": "e/1"}, ExpiresIn=1)
    r = send("PUT", url, body=b"late")
    assert (r.status, r.code) == (403, "AccessDenied")
    assert_absent(gateway, gw_bucket, "e/1")


def test_unsigned_requests_refused(gateway: Gateway, gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    s3.put_object(Bucket=gw_bucket, Key="u/1", Body=b"private")
    for method, path, body in [("GET", f"/{gw_bucket}/u/1", b""),
                               ("HEAD", f"/{gw_bucket}/u/1", b""),
                               ("PUT", f"/{gw_bucket}/u/2", b"anonymous"),
                               ("GET", f"/{gw_bucket}", b""),
                               ("GET", "/", b""),
                               ("DELETE", f"/{gw_bucket}/u/1", b"")]:
        r = send(method, gateway.endpoint + path, body=body)
        assert r.status == 403, (method, path, r.status)
        if method != "HEAD":
            assert r.code == "AccessDenied", (method, path, r.body[:200])
            assert b"private" not in r.body
    # the native API without a token, and with a malformed one
    for headers in ({}, {"Authorization": "Bearer nonsense"}):
        r = send("POST", f"{gateway.endpoint}/v1/{gw_bucket}/batch-get",
                 body=json.dumps({"keys": ["u/1"]}).encode(),
                 headers={"Content-Type": "application/json", **headers})
        assert r.status == 403
        assert json.loads(r.body)["error"] == "AccessDenied"
    assert_absent(gateway, gw_bucket, "u/2")
    assert s3.get_object(Bucket=gw_bucket, Key="u/1")["Body"].read() == b"private"


# ---- buckets, sizes, digests ---------------------------------------------------------------
def test_unknown_bucket(gateway: Gateway) -> None:
    s3 = gateway_client(gateway.endpoint)
    calls: list[Callable[[], Any]] = [
                 lambda: s3.get_object(Bucket="no-such-bucket", Key="k"),
                 lambda: s3.put_object(Bucket="no-such-bucket", Key="k", Body=b"x"),
                 lambda: s3.list_objects_v2(Bucket="no-such-bucket"),
                 lambda: s3.delete_object(Bucket="no-such-bucket", Key="k"),
                 lambda: s3.create_multipart_upload(Bucket="no-such-bucket", Key="k")]
    for call in calls:
        with pytest.raises(s3.exceptions.ClientError) as exc:
            call()
        err = exc.value.response
        assert err["Error"]["Code"] == "NoSuchBucket"
        assert err["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(s3.exceptions.ClientError) as exc:
        s3.head_bucket(Bucket="no-such-bucket")
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert "no-such-bucket" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_invalid_and_reserved_bucket_names(gateway: Gateway) -> None:
    s3 = gateway_client(gateway.endpoint)
    for name in ("healthz", "readyz", "metrics"):
        r = signed("PUT", f"{gateway.endpoint}/{name}")
        assert (r.status, r.code) == (400, "InvalidBucketName"), (name, r.status, r.body[:200])
    r = signed("PUT", f"{gateway.endpoint}/Bad_Name")
    assert (r.status, r.code) == (400, "InvalidBucketName")
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert "Bad_Name" not in names and "healthz" not in names and "metrics" not in names


def test_body_over_max_block_size(gateway: Gateway, gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    with pytest.raises(s3.exceptions.ClientError) as exc:
        s3.put_object(Bucket=gw_bucket, Key="big/1", Body=b"\0" * (MAX_BLOCK + 1))
    err = exc.value.response
    assert err["Error"]["Code"] == "EntityTooLarge"
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 400
    # exactly the limit is fine
    s3.put_object(Bucket=gw_bucket, Key="big/ok", Body=b"\1" * MAX_BLOCK)
    assert s3.head_object(Bucket=gw_bucket, Key="big/ok")["ContentLength"] == MAX_BLOCK
    # a multipart upload that grows past the limit
    up = s3.create_multipart_upload(Bucket=gw_bucket, Key="big/2")["UploadId"]
    s3.upload_part(Bucket=gw_bucket, Key="big/2", UploadId=up, PartNumber=1,
                   Body=b"\2" * MAX_BLOCK)
    with pytest.raises(s3.exceptions.ClientError) as exc:
        s3.upload_part(Bucket=gw_bucket, Key="big/2", UploadId=up, PartNumber=2, Body=b"\3" * 10)
    assert exc.value.response["Error"]["Code"] == "EntityTooLarge"
    s3.abort_multipart_upload(Bucket=gw_bucket, Key="big/2", UploadId=up)
    assert_absent(gateway, gw_bucket, "big/1")
    assert_absent(gateway, gw_bucket, "big/2")


def test_content_md5_mismatch(gateway: Gateway, gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
    with pytest.raises(s3.exceptions.ClientError) as exc:
        s3.put_object(Bucket=gw_bucket, Key="md5/1", Body=b"the body", ContentMD5=wrong)
    err = exc.value.response
    assert err["Error"]["Code"] == "BadDigest"
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert_absent(gateway, gw_bucket, "md5/1")
    # not base64 of 16 bytes at all
    r = signed("PUT", f"{gateway.endpoint}/{gw_bucket}/md5/2", body=b"x",
               headers={"Content-MD5": "!!notbase64"})
    assert (r.status, r.code) == (400, "InvalidDigest")
    # the right one is accepted
    right = base64.b64encode(hashlib.md5(b"the body").digest()).decode()
    s3.put_object(Bucket=gw_bucket, Key="md5/3", Body=b"the body", ContentMD5=right)
    assert s3.get_object(Bucket=gw_bucket, Key="md5/3")["Body"].read() == b"the body"
    assert_absent(gateway, gw_bucket, "md5/2")


def test_payload_sha256_mismatch(gateway: Gateway, gw_bucket: str) -> None:
    url = f"{gateway.endpoint}/{gw_bucket}/sha/1"
    hdrs = signed_headers("PUT", url, body=b"A" * 100,
                          payload_hash=hashlib.sha256(b"B" * 100).hexdigest())
    r = send("PUT", url, body=b"A" * 100, headers=hdrs)
    assert (r.status, r.code) == (400, "XAmzContentSHA256Mismatch")
    assert_absent(gateway, gw_bucket, "sha/1")


# ---- ranges --------------------------------------------------------------------------------
def test_malformed_and_unsatisfiable_ranges(gateway: Gateway, gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    s3.put_object(Bucket=gw_bucket, Key="r/1", Body=b"0123456789")
    url = f"{gateway.endpoint}/{gw_bucket}/r/1"
    for bad in ("bytes=abc", "items=0-1", "bytes=5-2", "bytes=-", "bytes=0-1,3-4"):
        r = signed("GET", url, headers={"Range": bad})
        assert (r.status, r.code) == (400, "InvalidArgument"), bad
    for unsat in ("bytes=10-", "bytes=100-200", "bytes=-0"):
        r = signed("GET", url, headers={"Range": unsat})
        assert (r.status, r.code) == (416, "InvalidRange"), unsat
        assert r.headers.get("Content-Range") == "bytes */10"
    with pytest.raises(s3.exceptions.ClientError) as exc:
        s3.get_object(Bucket=gw_bucket, Key="r/1", Range="bytes=20-30")
    assert exc.value.response["Error"]["Code"] == "InvalidRange"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    r = signed("GET", url, headers={"Range": "bytes=8-100"})  # clamped, as S3 does
    assert (r.status, r.body) == (206, b"89")


# ---- keys ----------------------------------------------------------------------------------
@pytest.mark.parametrize("raw_key", ["a/../b", "../escape", "a/./b", "..", "x/..",
                                     "ctl%01char", "new%0Aline", "del%7Fchar", "nul%00byte",
                                     "tab%09key"])
def test_bad_keys(gateway: Gateway, gw_bucket: str, raw_key: str) -> None:
    url = f"{gateway.endpoint}/{gw_bucket}/{raw_key}"
    r = signed("PUT", url, body=b"evil")
    assert (r.status, r.code) == (400, "InvalidArgument"), (raw_key, r.status, r.body[:300])
    r = signed("GET", url)
    assert r.status == 400, raw_key
    s3 = gateway_client(gateway.endpoint)
    assert s3.list_objects_v2(Bucket=gw_bucket)["KeyCount"] == 0


def test_bad_keys_through_boto3(gateway: Gateway, gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    for key in ("a/../b", "ctl\x01char"):
        with pytest.raises(s3.exceptions.ClientError) as exc:
            s3.put_object(Bucket=gw_bucket, Key=key, Body=b"evil")
        assert exc.value.response["Error"]["Code"] == "InvalidArgument"
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # DeleteObjects reports a bad key per key, and still deletes the good ones
    s3.put_object(Bucket=gw_bucket, Key="fine", Body=b"ok")
    out = s3.delete_objects(Bucket=gw_bucket, Delete={"Objects": [{"Key": "fine"},
                                                                  {"Key": "a/../b"}]})
    assert [d["Key"] for d in out["Deleted"]] == ["fine"]
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [("a/../b", "InvalidArgument")]
    assert s3.list_objects_v2(Bucket=gw_bucket)["KeyCount"] == 0


# ---- truncated bodies ----------------------------------------------------------------------
def _truncated_put(gateway: Gateway, bucket: str, key: str, declared: int, sent: int,
                   payload: str | None = "UNSIGNED-PAYLOAD") -> None:
    url = f"{gateway.endpoint}/{bucket}/{key}"
    hdrs = signed_headers("PUT", url, payload_hash=payload,
                          headers={"Content-Length": str(declared)})
    parts = urlsplit(url)
    lines = [f"PUT {parts.path} HTTP/1.1", f"Host: {parts.netloc}"]
    lines += [f"{k}: {v}" for k, v in hdrs.items() if k.lower() != "host"]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(head)
        sock.sendall(b"\x55" * sent)
        time.sleep(0.2)  # the gateway is mid-body now
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        try:  # a gateway may answer 400 before closing; either way nothing is stored
            reply = sock.recv(4096)
        except (TimeoutError, ConnectionResetError):
            reply = b""
    if reply:
        assert not reply.startswith(b"HTTP/1.1 2"), reply[:200]
        assert not reply.startswith(b"HTTP/1.1 5"), reply[:200]


@pytest.mark.parametrize("declared,sent", [(1_000_000, 300_000), (4 * 1024 * 1024, 10),
                                           (100, 0)])
def test_truncated_body(gateway: Gateway, gw_bucket: str, declared: int, sent: int) -> None:
    _truncated_put(gateway, gw_bucket, "cut/1", declared, sent)
    time.sleep(0.2)
    assert_absent(gateway, gw_bucket, "cut/1")
    assert_healthy(gateway)
    # the same key, written whole afterwards, is fine
    s3 = gateway_client(gateway.endpoint)
    s3.put_object(Bucket=gw_bucket, Key="cut/1", Body=b"whole")
    assert s3.get_object(Bucket=gw_bucket, Key="cut/1")["Body"].read() == b"whole"


def test_truncated_signed_payload(gateway: Gateway, gw_bucket: str) -> None:
    """A body whose SHA-256 was signed, cut short: also nothing stored."""
    full = b"\x55" * 200_000
    _truncated_put(gateway, gw_bucket, "cut/2", len(full), 150_000,
                   payload=hashlib.sha256(full).hexdigest())
    time.sleep(0.2)
    assert_absent(gateway, gw_bucket, "cut/2")
    assert_healthy(gateway)


def test_native_bad_input(gateway: Gateway, gw_bucket: str) -> None:
    auth = {"Authorization": f"Bearer {GW_ACCESS}:{GW_SECRET}"}
    base = f"{gateway.endpoint}/v1/{gw_bucket}"
    r = send("POST", base + "/lookup", body=b"not json", headers=auth)
    assert r.status == 400 and json.loads(r.body)["error"] == "InvalidArgument"
    r = send("POST", base + "/lookup", body=json.dumps({"keys": ["a/../b"]}).encode(),
             headers=auth)
    assert r.status == 400 and json.loads(r.body)["error"] == "InvalidArgument"
    r = send("POST", base + "/batch-put", body=b"\xff\xff\xff\x7fgarbage",
             headers={**auth, "Content-Type": "application/x-s3kv-frames"})
    assert r.status == 400 and json.loads(r.body)["error"] == "MalformedFrames"
    # a frame whose second key is bad: nothing of the batch is stored
    head = json.dumps({"blocks": [{"key": "n/ok", "length": 3},
                                  {"key": "n/../bad", "length": 3}]}).encode()
    body = len(head).to_bytes(4, "little") + head + b"abcdef"
    r = send("POST", base + "/batch-put", body=body,
             headers={**auth, "Content-Type": "application/x-s3kv-frames"})
    assert r.status == 400 and json.loads(r.body)["error"] == "InvalidArgument"
    assert_absent(gateway, gw_bucket, "n/ok")
    r = send("POST", f"{gateway.endpoint}/v1/no-such-ns/lookup",
             body=json.dumps({"keys": ["a"]}).encode(), headers=auth)
    assert r.status == 404 and json.loads(r.body)["error"] == "NoSuchBucket"
