"""Bad bodies against a running gateway: over the block size, a wrong Content-MD5 or signed
SHA-256, cut short, malformed native frames. Each a clear error code, never a 500, and nothing
of the body readable afterwards."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import time
from urllib.parse import urlsplit

import pytest

from tests.gateway.badinput import (
    assert_absent,
    assert_healthy,
    send,
    signed,
    signed_headers,
)
from tests.gateway.conftest import GW_ACCESS, GW_SECRET, MAX_BLOCK, Gateway, gateway_client

#: during every test here the gateway answers no request with a 5xx other than 503
pytestmark = pytest.mark.usefixtures("no_server_errors")


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
    # an upload exactly at the limit still takes an empty last part (it was refused)
    up = s3.create_multipart_upload(Bucket=gw_bucket, Key="big/3")["UploadId"]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(
        Bucket=gw_bucket, Key="big/3", UploadId=up, PartNumber=n, Body=body)["ETag"]}
        for n, body in ((1, b"\4" * MAX_BLOCK), (2, b""))]
    s3.complete_multipart_upload(Bucket=gw_bucket, Key="big/3", UploadId=up,
                                 MultipartUpload={"Parts": parts})
    assert s3.head_object(Bucket=gw_bucket, Key="big/3")["ContentLength"] == MAX_BLOCK


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
