"""Our SigV4 signer agrees with botocore's for the same request and time (UNSIGNED-PAYLOAD), and
so do its presigned URLs."""

from __future__ import annotations

import calendar
import time
from urllib.parse import parse_qs

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from s3kv.errors import RequestError
from s3kv.wire.sigv4 import UNSIGNED, Credentials, Signer, canonical_query, quote_path
from s3kv.wire.sigv4_verify import SigV4Verifier


class _UnsignedPayloadAuth(S3SigV4Auth):
    """botocore's S3 signer, told not to hash the payload (its HTTPS behaviour)."""

    def payload(self, request: AWSRequest) -> str:
        return UNSIGNED


def test_signature_matches_botocore() -> None:
    url_path = quote_path("/bucket/dir/key with space+plus.obj")
    query = canonical_query({"partNumber": "3", "uploadId": "a/b=c"})
    req = AWSRequest(method="PUT", url=f"http://127.0.0.1:9000{url_path}?{query}",
                     headers={"Range": "bytes=0-9", "x-amz-content-sha256": UNSIGNED})
    _UnsignedPayloadAuth(BotoCredentials("AKID", "SECRET"), "s3", "eu-west-1").add_auth(req)
    stamp = req.headers["X-Amz-Date"]
    now = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
    ours = Signer(Credentials("AKID", "SECRET", region="eu-west-1")).sign(
        "PUT", "127.0.0.1:9000", url_path, query, {"Range": "bytes=0-9"}, now=now)
    assert ours["Authorization"] == req.headers["Authorization"]
    assert ours["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"


def test_presigned_url_matches_botocore_and_verifies() -> None:
    """A presigned GET (the gateway's direct reads): the same signature as botocore's query
    signer for the same time, accepted by the gateway's verifier with a Range header added,
    refused for another key and once expired."""
    path = quote_path("/bucket/kv/segments/node-a/0190-00000007.seg")
    req = AWSRequest(method="GET", url=f"http://127.0.0.1:9000{path}")
    S3SigV4QueryAuth(BotoCredentials("AKID", "SECRET"), "s3", "eu-west-1",
                     expires=600).add_auth(req)
    theirs = parse_qs(req.url.split("?", 1)[1])
    now = calendar.timegm(time.strptime(theirs["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ"))
    query = Signer(Credentials("AKID", "SECRET", region="eu-west-1")).presign(
        "GET", "127.0.0.1:9000", path, 600, now=now)
    ours = parse_qs(query)
    assert ours["X-Amz-Signature"] == theirs["X-Amz-Signature"]
    assert ours["X-Amz-SignedHeaders"] == ["host"]

    verifier = SigV4Verifier({"AKID": "SECRET"})
    headers = {"host": "127.0.0.1:9000", "range": "bytes=4096-8191"}
    assert verifier.verify("GET", path, query, headers, now + 10).presigned
    with pytest.raises(RequestError) as info:
        verifier.verify("GET", path.replace("0007", "0008"), query, headers, now + 10)
    assert info.value.code == "SignatureDoesNotMatch"
    with pytest.raises(RequestError) as info:
        verifier.verify("GET", path, query, headers, now + 601)
    assert info.value.status == 403


def test_presigned_url_with_a_session_token_matches_botocore() -> None:
    """Temporary credentials (web identity, instance roles): the token is a signed query
    parameter, as botocore's query signer puts it."""
    path = quote_path("/bucket/kv/segments/n/0001.seg")
    req = AWSRequest(method="GET", url=f"http://s3.example:9000{path}")
    S3SigV4QueryAuth(BotoCredentials("AKID", "SECRET", "TOKEN/+="), "s3", "us-east-1",
                     expires=60).add_auth(req)
    theirs = parse_qs(req.url.split("?", 1)[1])
    now = calendar.timegm(time.strptime(theirs["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ"))
    ours = parse_qs(Signer(Credentials("AKID", "SECRET", "TOKEN/+=")).presign(
        "GET", "s3.example:9000", path, 60, now=now))
    assert ours["X-Amz-Security-Token"] == ["TOKEN/+="]
    assert ours["X-Amz-Signature"] == theirs["X-Amz-Signature"]
