"""SigV4 verification against requests signed by botocore, boto3's presigner and the minio SDK."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from multidict import CIMultiDict

from s3kv.errors import RequestError
from s3kv.wire.sigv4 import PayloadMode, canonical_query
from s3kv.wire.sigv4_verify import AuthContext, SigV4Verifier, has_auth

AK, SK = "AKIDS3KVTEST", "s3kv/secret+key"
ENDPOINT = "http://localhost:9470"


def _signed(method: str, url: str, *, body: bytes = b"", headers: dict[str, str] | None = None,
            region: str = "us-east-1", secret: str = SK, presign: int | None = None
            ) -> tuple[str, str, CIMultiDict[str]]:
    req = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    creds = Credentials(AK, secret)
    if presign is None:
        S3SigV4Auth(creds, "s3", region).add_auth(req)
    else:
        S3SigV4QueryAuth(creds, "s3", region, expires=presign).add_auth(req)
    prepared = req.prepare()
    parts = urlsplit(prepared.url)
    h: CIMultiDict[str] = CIMultiDict(prepared.headers)
    h["Host"] = parts.netloc
    return parts.path, parts.query, h


def _verify(method: str, path: str, query: str, headers: CIMultiDict[str],
            now: float | datetime | None = None, region: str | None = None) -> AuthContext:
    return SigV4Verifier({AK: SK}, region=region).verify(
        method, path, query, headers, time.time() if now is None else now)


def _code(fn: object, *args: object, **kw: object) -> str:
    with pytest.raises(RequestError) as info:
        fn(*args, **kw)  # type: ignore[operator]
    return info.value.code


URLS = [
    f"{ENDPOINT}/",
    f"{ENDPOINT}/bkt",
    f"{ENDPOINT}/bkt/dir/key%20with%20space%2Bplus~tilde",
    f"{ENDPOINT}/bkt/k?list-type=2&prefix=a%2Fb&delimiter=%2F&x=&x=1&empty",
    f"{ENDPOINT}/bkt/%E2%82%AC/%C3%A9t%C3%A9?uploads",
    "http://bkt.localhost:9470/key?partNumber=3&uploadId=abc%3D%3D",  # virtual-hosted style
    "http://127.0.0.1/bkt/k",  # default port: no port in Host
]


@pytest.mark.parametrize("url", URLS)
def test_botocore_header_auth_verifies(url: str) -> None:
    path, query, h = _signed("PUT", url, body=b"hello", headers={"x-amz-meta-a": " a   b "},
                             region="eu-west-3")
    ctx = _verify("PUT", path, query, h)
    assert ctx.access_key == AK and ctx.region == "eu-west-3"
    assert ctx.payload_mode is PayloadMode.SIGNED
    assert ctx.scope.endswith("/eu-west-3/s3/aws4_request")


@pytest.mark.parametrize("url", URLS)
def test_botocore_presigned_verifies(url: str) -> None:
    path, query, h = _signed("GET", url, presign=3600)
    ctx = _verify("GET", path, query, h)
    assert ctx.presigned and ctx.payload_mode is PayloadMode.UNSIGNED


def test_boto3_generate_presigned_url_and_expiry() -> None:
    s3 = boto3.client("s3", endpoint_url=ENDPOINT, aws_access_key_id=AK,
                      aws_secret_access_key=SK, region_name="us-west-2",
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": "a/b c.bin"},
                                    ExpiresIn=60)
    parts = urlsplit(url)
    h: CIMultiDict[str] = CIMultiDict({"Host": parts.netloc})
    assert _verify("GET", parts.path, parts.query, h).region == "us-west-2"
    later = time.time() + 120
    assert _code(_verify, "GET", parts.path, parts.query, h, later) == "AccessDenied"
    assert _code(_verify, "HEAD", parts.path, parts.query, h) == "SignatureDoesNotMatch"


def test_minio_presigned_url_verifies() -> None:
    from minio import Minio

    client = Minio("localhost:9470", access_key=AK, secret_key=SK, secure=False,
                   region="us-east-1")
    url = client.presigned_get_object("bkt", "obj/one", expires=timedelta(minutes=5))
    parts = urlsplit(url)
    h: CIMultiDict[str] = CIMultiDict({"Host": parts.netloc})
    assert _verify("GET", parts.path, parts.query, h).presigned


def test_wrong_secret_and_tampering() -> None:
    url = f"{ENDPOINT}/bkt/key?tagging"
    path, query, h = _signed("PUT", url, body=b"x", headers={"x-amz-meta-k": "v"}, secret="bad")
    assert _code(_verify, "PUT", path, query, h) == "SignatureDoesNotMatch"
    path, query, h = _signed("PUT", url, body=b"x", headers={"x-amz-meta-k": "v"})
    _verify("PUT", path, query, h)
    tampered = h.copy()
    tampered["x-amz-meta-k"] = "w"
    assert _code(_verify, "PUT", path, query, tampered) == "SignatureDoesNotMatch"
    assert _code(_verify, "PUT", path + "x", query, h) == "SignatureDoesNotMatch"
    assert _code(_verify, "PUT", path, query + "&x=1", h) == "SignatureDoesNotMatch"
    assert _code(_verify, "GET", path, query, h) == "SignatureDoesNotMatch"
    other_host = h.copy()
    other_host["Host"] = "localhost:9471"
    assert _code(_verify, "PUT", path, query, other_host) == "SignatureDoesNotMatch"


def test_presigned_tampered_query() -> None:
    path, query, h = _signed("GET", f"{ENDPOINT}/bkt/key", presign=60)
    assert _code(_verify, "GET", path, query.replace("X-Amz-Expires=60", "X-Amz-Expires=61"),
                 h) == "SignatureDoesNotMatch"
    assert _code(_verify, "GET", path, query + "&response-content-type=x", h) \
        == "SignatureDoesNotMatch"
    assert _code(_verify, "GET", "/bkt/other", query, h) == "SignatureDoesNotMatch"


def test_presigned_limits() -> None:
    path, query, h = _signed("GET", f"{ENDPOINT}/bkt/key", presign=8 * 24 * 3600)
    assert _code(_verify, "GET", path, query, h) == "AuthorizationQueryParametersError"
    path, query, h = _signed("GET", f"{ENDPOINT}/bkt/key", presign=60)
    before_signing = time.time() - 3600
    assert _code(_verify, "GET", path, query, h, before_signing) == "AccessDenied"
    no_alg = "&".join(p for p in query.split("&") if not p.startswith("X-Amz-Date"))
    assert _code(_verify, "GET", path, no_alg, h) == "AuthorizationQueryParametersError"


def test_clock_skew() -> None:
    path, query, h = _signed("GET", f"{ENDPOINT}/bkt/key")
    _verify("GET", path, query, h, time.time() + 14 * 60)
    assert _code(_verify, "GET", path, query, h, time.time() + 16 * 60) == "RequestTimeTooSkewed"
    assert _code(_verify, "GET", path, query, h, time.time() - 16 * 60) == "RequestTimeTooSkewed"


def test_unknown_key_region_and_malformed_headers() -> None:
    path, query, h = _signed("GET", f"{ENDPOINT}/bkt/key", region="eu-central-1")
    assert _code(lambda: SigV4Verifier({"OTHER": SK}).verify("GET", path, query, h,
                                                             time.time())) == "InvalidAccessKeyId"
    assert _code(_verify, "GET", path, query, h, region="us-east-1") \
        == "AuthorizationHeaderMalformed"
    assert _verify("GET", path, query, h, region="eu-central-1")
    auth = h["Authorization"]
    cases = {
        auth.replace("/s3/", "/ec2/"): "AuthorizationHeaderMalformed",
        auth.replace("aws4_request", "aws5_request"): "AuthorizationHeaderMalformed",
        auth.replace("SignedHeaders=", "Signed="): "AuthorizationHeaderMalformed",
        auth.split(", Signature=")[0]: "AuthorizationHeaderMalformed",
        "AWS4-HMAC-SHA256 garbage": "AuthorizationHeaderMalformed",
        "AWS AKID:c2ln": "InvalidRequest",
        "Bearer xyz": "AuthorizationHeaderMalformed",
        auth.replace("SignedHeaders=host;", "SignedHeaders="): "AuthorizationHeaderMalformed",
        auth[:-4] + "zzzz": "SignatureDoesNotMatch",
    }
    for value, code in cases.items():
        bad = h.copy()
        bad["Authorization"] = value
        assert _code(_verify, "GET", path, query, bad) == code, value
    for drop, code in (("x-amz-content-sha256", "InvalidRequest"), ("x-amz-date", "AccessDenied")):
        bad = h.copy()
        del bad[drop]
        assert _code(_verify, "GET", path, query, bad) == code
    bad = h.copy()
    bad["x-amz-content-sha256"] = "not-a-hash"
    assert _code(_verify, "GET", path, query, bad) == "InvalidArgument"
    assert _code(_verify, "GET", path, query, CIMultiDict({"Host": "x"})) == "AccessDenied"
    both = h.copy()
    _, pquery, _ = _signed("GET", f"{ENDPOINT}/bkt/key", presign=60)
    assert _code(_verify, "GET", path, pquery, both) == "InvalidArgument"


def test_multivalue_signed_header() -> None:
    now = datetime.now(UTC)
    path, query, h = _signed("GET", f"{ENDPOINT}/bkt/key", headers={"X-Amz-Meta-M": "a"})
    _verify("GET", path, query, h, now)
    h.add("x-amz-meta-m", "b")  # a second value of a signed header is part of what is signed
    assert _code(_verify, "GET", path, query, h, now) == "SignatureDoesNotMatch"


def test_canonical_query_rules() -> None:
    assert canonical_query("b=2&a=1&a=0&c") == "a=0&a=1&b=2&c="
    assert canonical_query("k=a%2Fb%20c&s=x+y") == "k=a%2Fb%20c&s=x%2By"
    assert canonical_query("X-Amz-Signature=s&z=1", drop="X-Amz-Signature") == "z=1"
    assert has_auth("X-Amz-Algorithm=AWS4-HMAC-SHA256", CIMultiDict())
    assert not has_auth("a=b", CIMultiDict({"Host": "h"}))


def test_aws_streaming_example_seed_signature() -> None:
    """The seed signature of AWS's published STREAMING-AWS4-HMAC-SHA256-PAYLOAD example."""
    from tests.gateway.test_payload import SPEC_HEADERS, spec_context

    ctx = spec_context()
    assert ctx.payload_mode is PayloadMode.STREAMING_SIGNED
    assert ctx.seed_signature == SPEC_HEADERS["Authorization"].rsplit("=", 1)[1]


def test_parse_stamp_matches_strptime_and_rejects_the_rest() -> None:
    from datetime import UTC, datetime

    from s3kv.wire.sigv4_verify import parse_stamp

    for text in ("20261130T120000Z", "20240229T235959Z", "19700101T000000Z"):
        assert parse_stamp(text) == datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    for bad in ("20261130T120000", "2026113T120000Z", "20261340T120000Z", "20261130T250000Z",
                "", "\uff12\uff10\uff12\uff161130T120000Z", "20261130t120000z"):  # fullwidth digits
        with pytest.raises(ValueError):
            parse_stamp(bad)


def test_path_signed_encoded_but_sent_raw_is_accepted() -> None:
    """A client that signed ``/bkt/a%2Bb`` but sent ``/bkt/a+b`` (the second, normalised
    candidate path); the path as sent is still the one tried first."""
    path, query, h = _signed("GET", f"{ENDPOINT}/bkt/a%2Bb%21")
    assert path == "/bkt/a%2Bb%21"
    _verify("GET", path, query, h)
    _verify("GET", "/bkt/a+b!", query, h)
    assert _code(_verify, "GET", "/bkt/a+c!", query, h) == "SignatureDoesNotMatch"


def test_date_header_instead_of_x_amz_date() -> None:
    from email.utils import formatdate

    from s3kv.wire.sigv4 import (
        UNSIGNED,
        canonical_request,
        credential_scope,
        derive_signing_key,
        signature,
        string_to_sign,
    )

    now = time.time()
    stamp = datetime.fromtimestamp(int(now), UTC)
    day, amz = stamp.strftime("%Y%m%d"), stamp.strftime("%Y%m%dT%H%M%SZ")
    h: CIMultiDict[str] = CIMultiDict({"Host": "localhost:9470",
                                       "Date": formatdate(int(now), usegmt=True),
                                       "x-amz-content-sha256": UNSIGNED})
    names = ["date", "host", "x-amz-content-sha256"]
    creq = canonical_request("GET", "/bkt/key", "", [(n, h[n]) for n in names], ";".join(names),
                             UNSIGNED)
    scope = credential_scope(day, "us-east-1")
    sig = signature(derive_signing_key(SK, day, "us-east-1"), string_to_sign(amz, scope, creq))
    h["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={AK}/{scope}, "
                          f"SignedHeaders={';'.join(names)}, Signature={sig}")
    assert _verify("GET", "/bkt/key", "", h, now).amz_date == amz
    assert _code(_verify, "GET", "/bkt/key", "", h, now + 16 * 60) == "RequestTimeTooSkewed"
    assert _code(_verify, "GET", "/bkt/key", "", h, datetime.fromtimestamp(now - 16 * 60, UTC)
                 ) == "RequestTimeTooSkewed"


def test_remembered_credentials_and_stamps_check_every_request() -> None:
    verifier = SigV4Verifier({AK: SK})
    path, query, h = _signed("GET", f"{ENDPOINT}/bkt/key")
    for _ in range(2):  # the second time from the verifier's memory of scope and stamp
        verifier.verify("GET", path, query, h, time.time())
        with pytest.raises(RequestError) as info:
            verifier.verify("GET", path + "x", query, h, time.time())
        assert info.value.code == "SignatureDoesNotMatch"
        with pytest.raises(RequestError) as info:
            verifier.verify("GET", path, query, h, time.time() + 16 * 60)
        assert info.value.code == "RequestTimeTooSkewed"
    _, _, other = _signed("GET", f"{ENDPOINT}/bkt/key", secret="bad")
    other["Authorization"] = other["Authorization"].replace(AK, "AKIDUNKNOWN")
    for _ in range(2):
        with pytest.raises(RequestError) as info:
            verifier.verify("GET", path, query, other, time.time())
        assert info.value.code == "InvalidAccessKeyId"
