"""The S3 front's allow-list (s3kv/gateway/classify.py) over HTTP, with boto3 and raw signed
requests: subresources and parameters the gateway does not implement answer 501 and leave every
stored byte as it was; headers asking for encryption, object lock, ACL grants, tags or another
storage class are refused and nothing is stored. The table is checked against botocore's own
S3 model, and a hypothesis property test throws random method + path + query + header
combinations at a running gateway."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any
from urllib.parse import quote

import botocore.session
import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3kv.errors import RequestError
from s3kv.gateway.classify import OPERATIONS, Level, classify
from tests.gateway.badinput import error_of, signed
from tests.gateway.conftest import Gateway

BODY = b"the original bytes \x00\x01\x02" * 100


def _object(s3: Any, bucket: str, key: str) -> tuple[bytes, str]:
    got = s3.get_object(Bucket=bucket, Key=key)
    return got["Body"].read(), got["ETag"]


@pytest.fixture
def victim(gw_s3: Any, gw_bucket: str) -> tuple[str, str]:
    gw_s3.put_object(Bucket=gw_bucket, Key="victim", Body=BODY)
    return gw_bucket, "victim"


# -- the table against botocore's S3 model ---------------------------------------------------

IMPLEMENTED = {op.name for op in OPERATIONS if op.implemented}
#: model operations whose request is another's, byte for byte (ListDirectoryBuckets is GET /;
#: the deprecated lifecycle and notification reads are their successors' requests)
SAME_REQUEST = {"ListDirectoryBuckets": "ListBuckets",
                "GetBucketLifecycle": "GetBucketLifecycleConfiguration",
                "GetBucketNotification": "GetBucketNotificationConfiguration"}


def _model_requests() -> list[tuple[str, str, Level, dict[str, list[str]], dict[str, str]]]:
    """Every operation of botocore's S3 model as the request it makes (required parameters)."""
    model = botocore.session.get_session().get_service_model("s3")
    out = []
    for name in model.operation_names:
        op = model.operation_model(name)
        uri = op.http["requestUri"]
        path, _, query = uri.partition("?")
        params: dict[str, list[str]] = {}
        for part in query.split("&"):
            if part:
                n, _, v = part.partition("=")
                params[n] = [v]
        headers: dict[str, str] = {}
        shape = op.input_shape
        for member in (shape.required_members if shape else []):
            m = shape.members[member]
            where = m.serialization.get("location")
            if where == "querystring":
                params[m.serialization["name"]] = ["1"]
            elif where == "header":
                headers[m.serialization["name"]] = "x"
        level = (Level.OBJECT if "{Key+}" in path else Level.BUCKET if "{Bucket}" in path
                 or path.strip("/") else Level.SERVICE)
        out.append((name, op.http["method"], level, params, headers))
    return out


def test_every_s3_model_operation_is_classified() -> None:
    """Each S3 API operation is either one the gateway implements (classified as itself, or
    as the implemented operation sending the identical request) or refused with 501."""
    seen_implemented = set()
    for name, method, level, params, headers in _model_requests():
        try:
            op = classify(method, level, params, headers)
        except RequestError as exc:
            assert name not in IMPLEMENTED, (name, exc)
            assert exc.status in (400, 501), (name, exc.status, exc)
            continue
        assert op.name == SAME_REQUEST.get(name, name), (name, op.name)
        seen_implemented.add(op.name)
    assert seen_implemented == IMPLEMENTED


def test_classification_is_the_same_when_remembered() -> None:
    """classify() remembers a request's shape (method, level, parameter names, selecting
    headers): the values are still checked on every request, and refusals are never kept."""
    for _ in range(2):
        assert classify("GET", Level.OBJECT, {"versionId": ["null"]}, {}).name == "GetObject"
        with pytest.raises(RequestError) as info:
            classify("GET", Level.OBJECT, {"versionId": ["v2"]}, {})
        assert (info.value.status, info.value.code) == (501, "NotImplemented")
        with pytest.raises(RequestError) as info:
            classify("PUT", Level.OBJECT, {"acl": [""]}, {})
        assert info.value.status == 501
        with pytest.raises(RequestError) as info:
            classify("GET", Level.OBJECT, {"partNumber": ["1", "2"]}, {})
        assert info.value.code == "InvalidArgument"
        assert classify("PUT", Level.OBJECT, {}, {}).name == "PutObject"
        # the header selects CopyObject, and with a part's parameters UploadPartCopy
        assert classify("PUT", Level.OBJECT, {}, {"x-amz-copy-source": "/b/k"}).name == \
            "CopyObject"
        assert classify("PUT", Level.OBJECT, {"uploadId": ["u"], "partNumber": ["1"]},
                        {"x-amz-copy-source": "/b/k"}).name == "UploadPartCopy"
        assert classify("GET", Level.BUCKET, {"versioning": [""]}, {}).name == \
            "GetBucketVersioning"
        with pytest.raises(RequestError) as info:  # only reading it: enabling is refused
            classify("PUT", Level.BUCKET, {"versioning": [""]}, {})
        assert info.value.status == 501


# -- boto3: object subresources change nothing -------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda s3, b, k: s3.put_object_tagging(Bucket=b, Key=k, Tagging={"TagSet": [
        {"Key": "a", "Value": "b"}]}),
    lambda s3, b, k: s3.put_object_acl(Bucket=b, Key=k, ACL="public-read"),
    lambda s3, b, k: s3.delete_object_tagging(Bucket=b, Key=k),
    lambda s3, b, k: s3.put_object_retention(Bucket=b, Key=k, Retention={
        "Mode": "GOVERNANCE", "RetainUntilDate": "2030-01-01T00:00:00Z"}),
    lambda s3, b, k: s3.put_object_legal_hold(Bucket=b, Key=k, LegalHold={"Status": "ON"}),
    lambda s3, b, k: s3.restore_object(Bucket=b, Key=k, RestoreRequest={"Days": 1}),
    lambda s3, b, k: s3.get_object(Bucket=b, Key=k, VersionId="3HL4kqtJlcpXroDTDmJ"),
    lambda s3, b, k: s3.delete_object(Bucket=b, Key=k, VersionId="3HL4kqtJlcpXroDTDmJ"),
    lambda s3, b, k: s3.get_object_torrent(Bucket=b, Key=k),
    lambda s3, b, k: s3.list_object_versions(Bucket=b, KeyMarker=k,
                                             VersionIdMarker="3HL4kqtJlcpXroDTDmJ"),
    lambda s3, b, k: s3.put_bucket_tagging(Bucket=b, Tagging={"TagSet": []}),
    lambda s3, b, k: s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={
        "Status": "Enabled"}),
    lambda s3, b, k: s3.copy_object(Bucket=b, Key=k, CopySource={"Bucket": b, "Key": k},
                                    MetadataDirective="REPLACE", TaggingDirective="REPLACE",
                                    Tagging="a=b"),
    lambda s3, b, k: s3.copy_object(Bucket=b, Key="new", CopySource={
        "Bucket": b, "Key": k, "VersionId": "3HL4kqtJlcpXroDTDmJ"}),
], ids=["put_object_tagging", "put_object_acl", "delete_object_tagging",
        "put_object_retention", "put_object_legal_hold",
        "restore_object", "get_object_version",
        "delete_object_version", "get_object_torrent", "list_object_versions_marker",
        "put_bucket_tagging", "put_bucket_versioning", "copy_object_tags",
        "copy_object_version"])
def test_unimplemented_operations_answer_501_and_change_nothing(
        gw_s3: Any, victim: tuple[str, str], call: Any) -> None:
    bucket, key = victim
    before = _object(gw_s3, bucket, key)
    with pytest.raises(ClientError) as exc:
        call(gw_s3, bucket, key)
    assert error_of(exc) == (501, "NotImplemented")
    assert _object(gw_s3, bucket, key) == before
    assert [o["Key"] for o in gw_s3.list_objects_v2(Bucket=bucket)["Contents"]] == [key]


def test_allowed_parameters_stay_allowed(gw_s3: Any, victim: tuple[str, str]) -> None:
    """What s3-semantics implements (response-* overrides, partNumber) and versionId=null
    pass the allow-list; boto3's x-id is on every call above and below."""
    bucket, key = victim
    assert _object(gw_s3, bucket, key)[0] == BODY
    got = gw_s3.get_object(Bucket=bucket, Key=key, VersionId="null",
                           ResponseContentType="text/plain", ResponseCacheControl="no-cache")
    assert got["Body"].read() == BODY
    assert gw_s3.head_object(Bucket=bucket, Key=key, PartNumber=1)["ResponseMetadata"][
        "HTTPStatusCode"] in (200, 206)
    gw_s3.delete_object(Bucket=bucket, Key=key, VersionId="null")
    with pytest.raises(ClientError) as exc:
        gw_s3.head_object(Bucket=bucket, Key=key)
    assert error_of(exc)[0] == 404


@pytest.mark.parametrize("extra,status,code", [
    ({"ServerSideEncryption": "AES256"}, 501, "NotImplemented"),
    ({"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "k"}, 501, "NotImplemented"),
    ({"SSECustomerAlgorithm": "AES256", "SSECustomerKey": "k" * 32}, 501, "NotImplemented"),
    ({"ObjectLockMode": "GOVERNANCE", "ObjectLockRetainUntilDate": "2030-01-01"}, 501,
     "NotImplemented"),
    ({"ObjectLockLegalHoldStatus": "ON"}, 501, "NotImplemented"),
    ({"StorageClass": "GLACIER"}, 400, "InvalidStorageClass"),
    ({"StorageClass": "REDUCED_REDUNDANCY"}, 400, "InvalidStorageClass"),
    ({"ACL": "public-read"}, 501, "NotImplemented"),
    ({"GrantRead": "id=someone"}, 501, "NotImplemented"),
    ({"Tagging": "a=b"}, 501, "NotImplemented"),
    ({"WebsiteRedirectLocation": "/elsewhere"}, 501, "NotImplemented"),
    ({"ExpectedBucketOwner": "111122223333"}, 403, "AccessDenied"),
], ids=["sse-s3", "sse-kms", "sse-c", "object-lock", "legal-hold", "glacier", "rrs",
        "public-acl", "grant", "tagging", "website-redirect", "other-owner"])
def test_guarantees_the_gateway_cannot_give_are_refused(
        gw_s3: Any, victim: tuple[str, str], extra: dict[str, str], status: int,
        code: str) -> None:
    bucket, key = victim
    before = _object(gw_s3, bucket, key)
    with pytest.raises(ClientError) as exc:  # an overwrite: the old bytes stay
        gw_s3.put_object(Bucket=bucket, Key=key, Body=b"secret", **extra)
    assert error_of(exc) == (status, code)
    with pytest.raises(ClientError) as exc:  # a new key: nothing stored
        gw_s3.put_object(Bucket=bucket, Key="new", Body=b"secret", **extra)
    assert error_of(exc) == (status, code)
    with pytest.raises(ClientError) as exc:
        gw_s3.create_multipart_upload(Bucket=bucket, Key="new-mpu", **extra)
    assert error_of(exc) == (status, code)
    assert _object(gw_s3, bucket, key) == before
    assert [o["Key"] for o in gw_s3.list_objects_v2(Bucket=bucket)["Contents"]] == [key]


def test_harmless_header_values_are_accepted(gw_s3: Any, gw_bucket: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"x", StorageClass="STANDARD",
                     ACL="private")
    assert _object(gw_s3, gw_bucket, "k")[0] == b"x"
    name = f"b-{uuid.uuid4().hex[:12]}"
    with pytest.raises(ClientError) as exc:
        gw_s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    assert error_of(exc) == (501, "NotImplemented")
    gw_s3.create_bucket(Bucket=name, ObjectOwnership="BucketOwnerEnforced")
    # a copy's tags are the source's (there are none) or none given: an empty tag set
    for directive in ("COPY", "REPLACE"):
        gw_s3.copy_object(Bucket=gw_bucket, Key=directive, CopySource={
            "Bucket": gw_bucket, "Key": "k"}, TaggingDirective=directive)
        assert _object(gw_s3, gw_bucket, directive)[0] == b"x"
        assert gw_s3.get_object_tagging(Bucket=gw_bucket, Key=directive)["TagSet"] == []
    with pytest.raises(ClientError) as exc:
        gw_s3.copy_object(Bucket=gw_bucket, Key="other", CopySource={
            "Bucket": gw_bucket, "Key": "k"}, TaggingDirective="MERGE")
    assert error_of(exc) == (501, "NotImplemented")


def test_the_expected_bucket_owner_is_checked(gw_s3: Any, victim: tuple[str, str]) -> None:
    """Every bucket is the one owner's that listings name: a request conditional on another
    owner (a copy's source on another) is S3's 403, and the one owner passes."""
    bucket, key = victim
    owner = gw_s3.list_objects(Bucket=bucket)["Contents"][0]["Owner"]["ID"]
    got = gw_s3.get_object(Bucket=bucket, Key=key, ExpectedBucketOwner=owner)
    assert got["Body"].read() == BODY
    with pytest.raises(ClientError) as exc:
        gw_s3.get_object(Bucket=bucket, Key=key, ExpectedBucketOwner="111122223333")
    assert error_of(exc) == (403, "AccessDenied")
    with pytest.raises(ClientError) as exc:
        gw_s3.copy_object(Bucket=bucket, Key="copied", CopySource={"Bucket": bucket, "Key": key},
                          ExpectedSourceBucketOwner="111122223333")
    assert error_of(exc) == (403, "AccessDenied")
    assert [o["Key"] for o in gw_s3.list_objects_v2(Bucket=bucket)["Contents"]] == [key]


def test_unknown_and_repeated_parameters(gateway: Gateway, victim: tuple[str, str]) -> None:
    bucket, key = victim
    base = f"{gateway.endpoint}/{bucket}/{key}"
    r = signed("PUT", base + "?foo=1", body=b"replaced")
    assert (r.status, r.code) == (501, "NotImplemented")
    r = signed("PUT", base + "?partNumber=1", body=b"replaced")  # no uploadId: not a part
    assert (r.status, r.code) == (501, "NotImplemented")
    r = signed("DELETE", base + "?ACL")  # subresource names are case-sensitive
    assert (r.status, r.code) == (501, "NotImplemented")
    r = signed("GET", base + "?versionId=null&versionId=abc")
    assert (r.status, r.code) == (400, "InvalidArgument")
    r = signed("PATCH", base, body=b"replaced")
    assert (r.status, r.code) == (405, "MethodNotAllowed")
    assert signed("GET", base).body == BODY


# -- the property: nothing outside the allow-list touches a byte -------------------------------

#: names the gateway must refuse (written here, not taken from classify.py)
FORBIDDEN_PARAMS = ["acl", "tagging", "retention", "legal-hold", "torrent",
                    "restore", "select", "select-type", "policy", "cors",
                    "lifecycle", "encryption", "website", "replication", "logging",
                    "notification", "object-lock", "analytics", "metrics",
                    "inventory", "intelligent-tiering", "ownershipControls",
                    "publicAccessBlock", "accelerate", "requestPayment", "policyStatus",
                    "session", "renameObject", "abac", "metadataTable", "ACL", "Tagging",
                    "foo", "id"]
#: of those, the ones a GET may name to read the configuration (absent, or the ACL private:
#: s3_configs.py)
READABLE = {"service": frozenset(), "victim": frozenset({"tagging", "acl"}),
            "new": frozenset({"tagging", "acl"}),
            "bucket": frozenset({"policy", "cors", "lifecycle", "encryption", "website",
                                 "replication", "logging", "notification", "object-lock",
                                 "publicAccessBlock", "accelerate", "requestPayment",
                                 "tagging", "acl", "ownershipControls", "policyStatus"})}
ALLOWED_PARAMS = ["uploads", "uploadId", "partNumber", "delete", "location", "versioning",
                  "versions", "list-type", "max-uploads", "key-marker", "prefix", "x-id",
                  "response-content-type", "max-keys", "marker", "attributes"]
FORBIDDEN_HEADERS = [
    ("x-amz-server-side-encryption", "AES256"),
    ("x-amz-server-side-encryption", "aws:kms"),
    ("x-amz-server-side-encryption-customer-algorithm", "AES256"),
    ("x-amz-storage-class", "GLACIER"), ("x-amz-storage-class", "standard"),
    ("x-amz-object-lock-mode", "GOVERNANCE"), ("x-amz-object-lock-legal-hold", "ON"),
    ("x-amz-acl", "public-read-write"), ("x-amz-grant-full-control", "id=x"),
    ("x-amz-tagging", "a=b"), ("x-amz-website-redirect-location", "/x"),
]
ALLOWED_HEADERS = [("x-amz-acl", "private"), ("x-amz-storage-class", "STANDARD"),
                   ("Content-Type", "text/plain"), ("x-amz-meta-a", "1")]


@st.composite
def requests(draw: Any) -> tuple[str, str, list[tuple[str, str | None]], dict[str, str],
                                 bytes, bool]:
    method = draw(st.sampled_from(["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH",
                                   "OPTIONS"]))
    where = draw(st.sampled_from(["service", "bucket", "victim", "new"]))
    forbidden = draw(st.lists(st.sampled_from(FORBIDDEN_PARAMS), max_size=2, unique=True))
    allowed = draw(st.lists(st.sampled_from(ALLOWED_PARAMS), max_size=3, unique=True))
    version = draw(st.sampled_from([None, None, "null", "abc123"]))
    params: list[tuple[str, str | None]] = [
        (n, draw(st.sampled_from([None, "", "1", "2", "x y"]))) for n in forbidden + allowed]
    if version is not None:
        params.append(("versionId", version))
    params = draw(st.permutations(params))
    bad_headers = draw(st.lists(st.sampled_from(FORBIDDEN_HEADERS), max_size=2,
                                unique_by=lambda h: h[0]))
    good_headers = draw(st.lists(st.sampled_from(ALLOWED_HEADERS), max_size=2,
                                 unique_by=lambda h: h[0]))
    headers = dict(good_headers)
    headers.update(dict(bad_headers))
    body = draw(st.sampled_from([b"", b"<Tagging><TagSet/></Tagging>", b"replacement"]))
    # a GET of one configuration the gateway never keeps reads it (as absent, or the ACL as
    # private): not a refusal, and like every GET it changes nothing (checked below)
    read = method == "GET" and len(forbidden) == 1 and forbidden[0] in READABLE[where]
    outside = ((bool(forbidden) and not read) or version == "abc123" or bool(bad_headers)
               or method in ("PATCH", "OPTIONS"))
    return method, where, params, headers, body, outside


def _snapshot(s3: Any, bucket: str) -> tuple[Any, ...]:
    buckets = sorted(b["Name"] for b in s3.list_buckets()["Buckets"])
    objects = []
    for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        data = s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        objects.append((o["Key"], o["ETag"], o["Size"], hashlib.sha256(data).hexdigest()))
    return tuple(buckets), tuple(objects)


BASELINE: dict[str, tuple[Any, ...]] = {}


@pytest.fixture(scope="module")
def property_bucket(gateway: Gateway) -> str:
    from tests.gateway.conftest import gateway_client
    s3 = gateway_client(gateway.endpoint)
    name = f"prop-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="victim", Body=BODY)
    s3.put_object(Bucket=name, Key="other/obj", Body=b"second object")
    return name


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(req=requests())
def test_property_requests_outside_the_allow_list_change_nothing(
        gateway: Gateway, gw_s3: Any, property_bucket: str,
        req: tuple[str, str, list[tuple[str, str | None]], dict[str, str], bytes, bool]
        ) -> None:
    method, where, params, headers, body, outside = req
    path = {"service": "/", "bucket": f"/{property_bucket}",
            "victim": f"/{property_bucket}/victim", "new": f"/{property_bucket}/new-key"}[where]
    query = "&".join(quote(n, safe="") if v is None else f"{quote(n, safe='')}="
                     f"{quote(v, safe='')}" for n, v in params)
    url = gateway.endpoint + path + (f"?{query}" if query else "")
    # the state before: the fixture's, re-established after every allowed write
    before = BASELINE.get(property_bucket) or BASELINE.setdefault(
        property_bucket, _snapshot(gw_s3, property_bucket))
    r = signed(method, url, body=body, headers=headers)
    if outside:
        assert not 200 <= r.status < 300, (method, url, headers, r.status, r.body[:300])
        assert r.status < 500 or r.status == 501, (method, url, r.status, r.body[:300])
        assert _snapshot(gw_s3, property_bucket) == before, (method, url, headers)
    else:
        assert r.status < 500 or r.status in (501, 503), (method, url, r.status, r.body[:300])
        if not 200 <= r.status < 300 or method in ("GET", "HEAD"):  # a refusal or a read
            assert _snapshot(gw_s3, property_bucket) == before, (method, url, r.status)
        elif _snapshot(gw_s3, property_bucket) != before:  # an allowed write: undo it
            _restore(gw_s3, property_bucket)
            BASELINE[property_bucket] = _snapshot(gw_s3, property_bucket)


def _restore(s3: Any, bucket: str) -> None:
    for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        if o["Key"] not in ("victim", "other/obj"):
            s3.delete_object(Bucket=bucket, Key=o["Key"])
    s3.put_object(Bucket=bucket, Key="victim", Body=BODY)
    s3.put_object(Bucket=bucket, Key="other/obj", Body=b"second object")
