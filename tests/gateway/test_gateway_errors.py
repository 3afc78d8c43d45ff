"""Bad input against a running gateway: each a clear S3 error code and status, never a 500, and
nothing half-written becomes readable afterwards."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.gateway.badinput import (
    assert_absent,
    send,
    signed,
    signed_headers,
)
from tests.gateway.conftest import GW_ACCESS, Gateway, gateway_client
from tests.support.clock import EXPIRED_BY, botocore_signs_earlier

#: during every test here the gateway answers no request with a 5xx other than 503
pytestmark = pytest.mark.usefixtures("no_server_errors")


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


# ---- ranges --------------------------------------------------------------------------------
def test_malformed_and_unsatisfiable_ranges(gateway: Gateway, gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    s3.put_object(Bucket=gw_bucket, Key="r/1", Body=b"0123456789")
    url = f"{gateway.endpoint}/{gw_bucket}/r/1"
    # not one valid range (several ranges among them): ignored, the whole object, as S3 does
    for bad in ("bytes=abc", "items=0-1", "bytes=5-2", "bytes=-", "bytes=0-1,3-4", "bytes"):
        r = signed("GET", url, headers={"Range": bad})
        assert (r.status, r.body) == (200, b"0123456789"), bad
        assert "Content-Range" not in r.headers, bad
        head = s3.head_object(Bucket=gw_bucket, Key="r/1", Range=bad)
        assert head["ResponseMetadata"]["HTTPStatusCode"] == 200, bad
        assert head["ContentLength"] == 10 and "ContentRange" not in head, bad
    got = s3.get_object(Bucket=gw_bucket, Key="r/1", Range="bytes=0-1,3-4")
    assert got["Body"].read() == b"0123456789" and "ContentRange" not in got
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


def test_every_range_of_an_empty_object_is_unsatisfiable(gateway: Gateway,
                                                          gw_bucket: str) -> None:
    """An empty object has no byte a range could name: a suffix range included (it once came
    back 206 with ``Content-Range: bytes 0--1/0``), as RGW answers; an ignored one is 200."""
    s3 = gateway_client(gateway.endpoint)
    s3.put_object(Bucket=gw_bucket, Key="r/empty", Body=b"")
    url = f"{gateway.endpoint}/{gw_bucket}/r/empty"
    for unsat in ("bytes=-1", "bytes=-100", "bytes=0-", "bytes=0-0"):
        for method in ("GET", "HEAD"):
            r = signed(method, url, headers={"Range": unsat})
            assert r.status == 416, (method, unsat, r.status, r.headers)
            assert r.headers.get("Content-Range") == "bytes */0", (method, unsat)
    r = signed("GET", url, headers={"Range": "bytes=5-2"})
    assert (r.status, r.body) == (200, b"") and "Content-Range" not in r.headers


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
