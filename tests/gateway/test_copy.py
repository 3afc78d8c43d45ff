"""Server-side copies through the S3 front (s3kv/gateway/copy.py), with boto3 on a real gateway
process over HTTP: CopyObject (metadata directive, conditions, a multipart source, errors) and
UploadPartCopy (ranges), each checked by reading back what was stored. The AWS CLI's copies
(`aws s3 cp s3://... s3://...`, a multipart copy) are in test_s3_tools.py; GetBucketVersioning
is here too (s3fs asks for it before it deletes a bucket's objects)."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.gateway.badinput import error_of
from tests.gateway.conftest import Gateway, gateway_client
from tests.support.gateway import SMALL, backend_store, running_gateway
from tests.support.s3server import MotoServer

pytestmark = pytest.mark.usefixtures("no_server_errors")

BODY = os.urandom(300_000)
MiB = 1024 * 1024


def _read(s3: Any, bucket: str, key: str) -> bytes:
    data: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return data


@pytest.fixture
def source(gw_s3: Any, gw_bucket: str) -> dict[str, Any]:
    gw_s3.put_object(Bucket=gw_bucket, Key="src", Body=BODY, ContentType="text/x-kv",
                     CacheControl="max-age=60", Metadata={"model": "llama", "layer": "7"},
                     ChecksumAlgorithm="CRC32")
    return gw_s3.head_object(Bucket=gw_bucket, Key="src", ChecksumMode="ENABLED")


def test_copy_keeps_bytes_etag_metadata_and_checksum(gw_s3: Any, gw_bucket: str,
                                                     source: dict[str, Any]) -> None:
    r = gw_s3.copy_object(Bucket=gw_bucket, Key="dst", CopySource={"Bucket": gw_bucket,
                                                                   "Key": "src"})
    assert r["CopyObjectResult"]["ETag"] == source["ETag"] == f'"{hashlib.md5(BODY).hexdigest()}"'
    assert isinstance(r["CopyObjectResult"]["LastModified"], datetime)
    assert r["CopyObjectResult"]["ChecksumCRC32"] == source["ChecksumCRC32"]
    assert _read(gw_s3, gw_bucket, "dst") == BODY
    head = gw_s3.head_object(Bucket=gw_bucket, Key="dst", ChecksumMode="ENABLED")
    for field in ("ETag", "ContentType", "CacheControl", "Metadata", "ContentLength",
                  "ChecksumCRC32"):
        assert head[field] == source[field], field
    # the copy stands on its own: the source can change or go
    gw_s3.put_object(Bucket=gw_bucket, Key="src", Body=b"new")
    gw_s3.delete_object(Bucket=gw_bucket, Key="src")
    assert _read(gw_s3, gw_bucket, "dst") == BODY


def test_a_checksum_the_copy_request_asks_for(gw_s3: Any, gw_bucket: str,
                                              source: dict[str, Any]) -> None:
    r = gw_s3.copy_object(Bucket=gw_bucket, Key="dst", CopySource=f"{gw_bucket}/src",
                          ChecksumAlgorithm="SHA256")
    want = base64.b64encode(hashlib.sha256(BODY).digest()).decode()
    assert r["CopyObjectResult"]["ChecksumSHA256"] == want
    head = gw_s3.head_object(Bucket=gw_bucket, Key="dst", ChecksumMode="ENABLED")
    assert (head["ChecksumSHA256"], head["ChecksumType"]) == (want, "FULL_OBJECT")
    assert head["ETag"] == source["ETag"]


def test_replace_takes_the_request_metadata(gw_s3: Any, gw_bucket: str,
                                            source: dict[str, Any]) -> None:
    gw_s3.copy_object(Bucket=gw_bucket, Key="dst", CopySource=f"{gw_bucket}/src",
                      MetadataDirective="REPLACE", ContentType="application/x-new",
                      Metadata={"model": "qwen"})
    head = gw_s3.head_object(Bucket=gw_bucket, Key="dst")
    assert (head["ContentType"], head["Metadata"]) == ("application/x-new", {"model": "qwen"})
    assert "CacheControl" not in head
    assert head["ETag"] == source["ETag"]
    # COPY (the default) ignores the request's metadata
    gw_s3.copy_object(Bucket=gw_bucket, Key="dst2", CopySource=f"{gw_bucket}/src",
                      ContentType="ignored/ignored", Metadata={"x": "y"})
    head2 = gw_s3.head_object(Bucket=gw_bucket, Key="dst2")
    assert (head2["ContentType"], head2["Metadata"]) == ("text/x-kv", source["Metadata"])


def test_copy_onto_itself_must_replace(gw_s3: Any, gw_bucket: str,
                                       source: dict[str, Any]) -> None:
    with pytest.raises(ClientError) as exc:
        gw_s3.copy_object(Bucket=gw_bucket, Key="src", CopySource=f"{gw_bucket}/src")
    assert error_of(exc) == (400, "InvalidRequest")
    assert gw_s3.head_object(Bucket=gw_bucket, Key="src")["Metadata"] == source["Metadata"]
    gw_s3.copy_object(Bucket=gw_bucket, Key="src", CopySource=f"{gw_bucket}/src",
                      MetadataDirective="REPLACE", Metadata={"rewritten": "1"})
    assert gw_s3.head_object(Bucket=gw_bucket, Key="src")["Metadata"] == {"rewritten": "1"}
    assert _read(gw_s3, gw_bucket, "src") == BODY


def test_copy_onto_itself_naming_a_storage_class(gw_s3: Any, gw_bucket: str,
                                                source: dict[str, Any]) -> None:
    """S3 takes a copy onto itself that names a storage class, the same one included (rclone's
    ``settier STANDARD``, ``aws s3 cp --storage-class STANDARD`` of a key onto itself): the
    object stays as it was, its metadata copied."""
    answer = gw_s3.copy_object(Bucket=gw_bucket, Key="src", CopySource=f"{gw_bucket}/src",
                               StorageClass="STANDARD")
    assert answer["CopyObjectResult"]["ETag"] == source["ETag"]
    head = gw_s3.head_object(Bucket=gw_bucket, Key="src")
    assert (head["Metadata"], head["ContentType"]) == (source["Metadata"], "text/x-kv")
    assert _read(gw_s3, gw_bucket, "src") == BODY


def test_across_buckets_and_keys_that_need_encoding(gw_s3: Any, gw_bucket: str,
                                                   source: dict[str, Any]) -> None:
    other = gw_bucket + "-2"
    gw_s3.create_bucket(Bucket=other)
    odd = "dir/a key+with%signs/ü?x=1"
    gw_s3.copy_object(Bucket=other, Key=odd, CopySource={"Bucket": gw_bucket, "Key": "src"})
    gw_s3.copy_object(Bucket=gw_bucket, Key="back", CopySource={"Bucket": other, "Key": odd})
    assert _read(gw_s3, other, odd) == _read(gw_s3, gw_bucket, "back") == BODY
    gw_s3.copy_object(Bucket=gw_bucket, Key="null-version",
                      CopySource={"Bucket": gw_bucket, "Key": "src", "VersionId": "null"})
    assert _read(gw_s3, gw_bucket, "null-version") == BODY


@pytest.mark.parametrize("copy_source,dest,expected", [
    ("{b}/missing", "dst", (404, "NoSuchKey")),
    ("{b}-nobucket/src", "dst", (404, "NoSuchBucket")),
    ("{b}/src", "!nobucket", (404, "NoSuchBucket")),
    ("{b}", "dst", (400, "InvalidArgument")),
], ids=["no-source-key", "no-source-bucket", "no-dest-bucket", "no-key"])
def test_copy_errors_store_nothing(gw_s3: Any, gw_bucket: str, source: dict[str, Any],
                                   copy_source: str, dest: str, expected: tuple[int, str]
                                   ) -> None:
    """(A source version other than null is a 501: test_allow_list.py.)"""
    src = copy_source.format(b=gw_bucket)
    bucket = gw_bucket + "-nobucket" if dest == "!nobucket" else gw_bucket
    with pytest.raises(ClientError) as exc:
        gw_s3.copy_object(Bucket=bucket, Key="dst", CopySource=src)
    assert error_of(exc) == expected
    keys = [o["Key"] for o in gw_s3.list_objects_v2(Bucket=gw_bucket)["Contents"]]
    assert keys == ["src"]


def test_copy_source_conditions(gw_s3: Any, gw_bucket: str, source: dict[str, Any]) -> None:
    src = f"{gw_bucket}/src"
    past = datetime.now(UTC) - timedelta(days=1)
    future = datetime.now(UTC) + timedelta(days=1)
    failing = [{"CopySourceIfMatch": '"0123456789abcdef0123456789abcdef"'},
               {"CopySourceIfNoneMatch": source["ETag"]},
               {"CopySourceIfModifiedSince": future},
               {"CopySourceIfUnmodifiedSince": past}]
    for cond in failing:
        with pytest.raises(ClientError) as exc:
            gw_s3.copy_object(Bucket=gw_bucket, Key="dst", CopySource=src, **cond)
        assert error_of(exc) == (412, "PreconditionFailed"), cond
    assert [o["Key"] for o in gw_s3.list_objects_v2(Bucket=gw_bucket)["Contents"]] == ["src"]
    holding = [{"CopySourceIfMatch": source["ETag"]}, {"CopySourceIfNoneMatch": '"other"'},
               {"CopySourceIfModifiedSince": past}, {"CopySourceIfUnmodifiedSince": future},
               # S3's rule: If-Match true and If-Unmodified-Since false copies
               {"CopySourceIfMatch": source["ETag"], "CopySourceIfUnmodifiedSince": past}]
    for i, cond in enumerate(holding):
        gw_s3.copy_object(Bucket=gw_bucket, Key=f"dst{i}", CopySource=src, **cond)
        assert _read(gw_s3, gw_bucket, f"dst{i}") == BODY, cond
    # the destination's own condition: put-if-absent
    with pytest.raises(ClientError) as exc:
        gw_s3.copy_object(Bucket=gw_bucket, Key="dst0", CopySource=src, IfNoneMatch="*")
    assert error_of(exc) == (412, "PreconditionFailed")


@pytest.fixture
def mp_s3(multipart_gateway: Gateway) -> Any:
    return gateway_client(multipart_gateway.endpoint)


def _multipart(s3: Any, bucket: str, key: str, parts: list[bytes], **extra: Any) -> Any:
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, **extra)["UploadId"]
    done = []
    for n, data in enumerate(parts, 1):
        kw = {"ChecksumAlgorithm": extra["ChecksumAlgorithm"]} if extra else {}
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=data, **kw)
        done.append({"PartNumber": n, "ETag": r["ETag"],
                     **{k: v for k, v in r.items() if k.startswith("Checksum")}})
    return s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                        MultipartUpload={"Parts": done})


def test_a_multipart_source_copies_as_one_part(mp_s3: Any) -> None:
    bucket = f"copy-mp-{os.urandom(4).hex()}"
    mp_s3.create_bucket(Bucket=bucket)
    parts = [os.urandom(5 * MiB), os.urandom(MiB)]
    done = _multipart(mp_s3, bucket, "mp", parts, ChecksumAlgorithm="SHA256")
    assert done["ETag"].endswith('-2"')
    r = mp_s3.copy_object(Bucket=bucket, Key="copy", CopySource=f"{bucket}/mp")
    whole = b"".join(parts)
    # the copy has no parts: its ETag is its MD5 and the composite checksum is not kept
    assert r["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(whole).hexdigest()}"'
    head = mp_s3.head_object(Bucket=bucket, Key="copy", PartNumber=1, ChecksumMode="ENABLED")
    assert "PartsCount" not in head and "ChecksumSHA256" not in head
    assert head["ContentLength"] == len(whole)
    assert _read(mp_s3, bucket, "copy") == whole


def test_upload_part_copy_ranges(mp_s3: Any) -> None:
    bucket = f"copy-part-{os.urandom(4).hex()}"
    mp_s3.create_bucket(Bucket=bucket)
    src = os.urandom(7 * MiB)
    mp_s3.put_object(Bucket=bucket, Key="src", Body=src)
    up = mp_s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
    ranges = [(0, 5 * MiB - 1), (6 * MiB, 7 * MiB - 1)]
    done = []
    for n, (first, last) in enumerate(ranges, 1):
        r = mp_s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=up, PartNumber=n,
                                   CopySource=f"{bucket}/src",
                                   CopySourceRange=f"bytes={first}-{last}")
        etag = r["CopyPartResult"]["ETag"]
        assert etag == f'"{hashlib.md5(src[first:last + 1]).hexdigest()}"'
        done.append({"PartNumber": n, "ETag": etag})
    for bad, expected in [("bytes=5-2", (400, "InvalidArgument")),
                          ("items=0-4", (400, "InvalidArgument")),
                          (f"bytes=0-{7 * MiB}", (416, "InvalidRange"))]:
        with pytest.raises(ClientError) as exc:
            mp_s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=up, PartNumber=3,
                                   CopySource=f"{bucket}/src", CopySourceRange=bad)
        assert error_of(exc) == expected, bad
    mp_s3.complete_multipart_upload(Bucket=bucket, Key="dst", UploadId=up,
                                    MultipartUpload={"Parts": done})
    assert _read(mp_s3, bucket, "dst") == src[:5 * MiB] + src[6 * MiB:]
    # the whole source as a part when no range is given
    up2 = mp_s3.create_multipart_upload(Bucket=bucket, Key="whole")["UploadId"]
    r = mp_s3.upload_part_copy(Bucket=bucket, Key="whole", UploadId=up2, PartNumber=1,
                               CopySource={"Bucket": bucket, "Key": "src"})
    mp_s3.complete_multipart_upload(Bucket=bucket, Key="whole", UploadId=up2, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": r["CopyPartResult"]["ETag"]}]})
    assert _read(mp_s3, bucket, "whole") == src


def test_bucket_versioning_is_never_enabled(gw_s3: Any, gw_bucket: str) -> None:
    """(Enabling it is a 501 that changes nothing: test_allow_list.py.)"""
    got = gw_s3.get_bucket_versioning(Bucket=gw_bucket)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert "Status" not in got and "MFADelete" not in got
    with pytest.raises(ClientError) as exc:
        gw_s3.get_bucket_versioning(Bucket=gw_bucket + "-none")
    assert error_of(exc) == (404, "NoSuchBucket")


@pytest.fixture(scope="module")
def tight_gateway(s3_server: MotoServer) -> Iterator[Gateway]:
    """Request memory for 4 MiB of bodies and staged parts at once (the largest block too)."""
    with running_gateway(backend_store(s3_server), [*SMALL, "--max-request-memory", "4MiB",
                                                    "--max-block-size", "4MiB"]) as gw:
        yield gw


def test_copies_stay_within_the_request_memory_budget(tight_gateway: Gateway) -> None:
    """A copy holds its source's bytes: with the budget taken by a staged part it is refused
    with 503 SlowDown and stores nothing, and goes through once the part is gone."""
    s3 = gateway_client(tight_gateway.endpoint)
    bucket = f"tight-{os.urandom(4).hex()}"
    s3.create_bucket(Bucket=bucket)
    src = os.urandom(2 * MiB)
    s3.put_object(Bucket=bucket, Key="src", Body=src)
    up = s3.create_multipart_upload(Bucket=bucket, Key="held")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="held", UploadId=up, PartNumber=1, Body=b"x" * (3 * MiB))
    other = s3.create_multipart_upload(Bucket=bucket, Key="parts")["UploadId"]
    for call in (lambda: s3.copy_object(Bucket=bucket, Key="dst", CopySource=f"{bucket}/src"),
                 lambda: s3.upload_part_copy(Bucket=bucket, Key="parts", UploadId=other,
                                             PartNumber=1, CopySource=f"{bucket}/src")):
        with pytest.raises(ClientError) as exc:
            call()
        assert error_of(exc) == (503, "SlowDown")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["src"]
    assert "Parts" not in s3.list_parts(Bucket=bucket, Key="parts", UploadId=other)
    s3.abort_multipart_upload(Bucket=bucket, Key="held", UploadId=up)
    s3.copy_object(Bucket=bucket, Key="dst", CopySource=f"{bucket}/src")
    assert _read(s3, bucket, "dst") == src
