"""GetObjectAttributes (s3kv/gateway/s3_attributes.py) with boto3 against a real gateway on
moto: the five attributes of a single-part and of a multipart object, the parts paged, and
clear 4xx answers for what is missing or wrong; and the same call against moto directly, as
the reference for what a client reads back."""

from __future__ import annotations

import base64
import hashlib
import uuid
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.gateway.badinput import error_of, signed
from tests.gateway.conftest import Gateway
from tests.support.gateway import gateway_client
from tests.support.s3server import MotoServer

ALL = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]
MiB = 1 << 20


def _sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def _single(s3: Any, bucket: str) -> tuple[dict[str, Any], dict[str, Any]]:
    body = b"attributes " * 1000
    put = s3.put_object(Bucket=bucket, Key="one", Body=body, ChecksumAlgorithm="SHA256")
    got = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=ALL)
    assert put["ChecksumSHA256"] == _sha256(body)
    return put, got


def test_a_single_part_objects_attributes(gw_s3: Any, gw_bucket: str) -> None:
    put, got = _single(gw_s3, gw_bucket)
    assert got["ETag"] == put["ETag"].strip('"')  # unquoted here, as S3 gives it
    assert got["ObjectSize"] == 11000
    assert got["StorageClass"] == "STANDARD"
    assert got["Checksum"]["ChecksumSHA256"] == put["ChecksumSHA256"]
    assert got["Checksum"]["ChecksumType"] == "FULL_OBJECT"
    assert "ObjectParts" not in got  # not a multipart object
    assert got["LastModified"] == gw_s3.head_object(Bucket=gw_bucket, Key="one")["LastModified"]
    only = gw_s3.get_object_attributes(Bucket=gw_bucket, Key="one", ObjectAttributes=["ObjectSize"])
    assert only["ObjectSize"] == 11000
    assert not {"ETag", "Checksum", "StorageClass"} & set(only)


def test_moto_reads_the_same_for_a_single_part_object(s3_server: MotoServer) -> None:
    """The reference: moto, a real S3 server over HTTP, answers the fields we answer alike."""
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1",
                      aws_access_key_id="x", aws_secret_access_key="y",
                      config=Config(s3={"addressing_style": "path"}))
    s3.create_bucket(Bucket="attrs-reference")
    put, got = _single(s3, "attrs-reference")
    assert got["ETag"] == put["ETag"].strip('"')
    assert (got["ObjectSize"], got["StorageClass"]) == (11000, "STANDARD")
    assert got["Checksum"]["ChecksumSHA256"] == put["ChecksumSHA256"]
    assert "ObjectParts" not in got


def test_a_multipart_objects_parts_are_counted_and_paged(multipart_gateway: Gateway) -> None:
    gw_s3 = gateway_client(multipart_gateway.endpoint)
    gw_bucket = f"mp-{uuid.uuid4().hex[:12]}"
    gw_s3.create_bucket(Bucket=gw_bucket)
    parts = [b"a" * 5 * MiB, b"b" * 5 * MiB, b"c" * 1000]
    up = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="multi", ChecksumAlgorithm="CRC32")
    done = []
    for n, data in enumerate(parts, 1):
        r = gw_s3.upload_part(Bucket=gw_bucket, Key="multi", UploadId=up["UploadId"],
                              PartNumber=n, Body=data, ChecksumAlgorithm="CRC32")
        done.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    end = gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="multi",
                                          UploadId=up["UploadId"],
                                          MultipartUpload={"Parts": done})
    got = gw_s3.get_object_attributes(Bucket=gw_bucket, Key="multi", ObjectAttributes=ALL,
                                      MaxParts=2)
    assert got["ETag"] == end["ETag"].strip('"') and got["ETag"].endswith("-3")
    assert got["ObjectSize"] == sum(map(len, parts))
    assert got["Checksum"]["ChecksumType"] == "COMPOSITE"
    assert got["Checksum"]["ChecksumCRC32"] == end["ChecksumCRC32"].partition("-")[0]
    assert got["ObjectParts"] == {"TotalPartsCount": 3, "PartNumberMarker": 0,
                                  "NextPartNumberMarker": 2, "MaxParts": 2, "IsTruncated": True}
    rest = gw_s3.get_object_attributes(Bucket=gw_bucket, Key="multi", MaxParts=2,
                                       PartNumberMarker=2, ObjectAttributes=["ObjectParts"])
    assert rest["ObjectParts"] == {"TotalPartsCount": 3, "PartNumberMarker": 2,
                                   "NextPartNumberMarker": 3, "MaxParts": 2,
                                   "IsTruncated": False}


@pytest.mark.parametrize("headers, says", [
    ({}, "needs the x-amz-object-attributes header"),
    ({"x-amz-object-attributes": "ETag,Colour"}, "Invalid attribute name specified: Colour"),
    ({"x-amz-object-attributes": "ETag", "x-amz-max-parts": "many"}, "x-amz-max-parts must"),
])
def test_what_is_missing_or_wrong_is_a_clear_400(gateway: Gateway, gw_s3: Any, gw_bucket: str,
                                                 headers: dict[str, str], says: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"v")
    r = signed("GET", f"{gateway.endpoint}/{gw_bucket}/k?attributes", headers=headers)
    assert (r.status, r.code) == (400, "InvalidArgument"), r.body[:300]
    assert says in r.body.decode()


def test_absent_objects_buckets_and_versions(gateway: Gateway, gw_s3: Any,
                                             gw_bucket: str) -> None:
    for bucket, key, want in ((gw_bucket, "absent", (404, "NoSuchKey")),
                              ("no-such-bucket-here", "k", (404, "NoSuchBucket"))):
        with pytest.raises(ClientError) as err:
            gw_s3.get_object_attributes(Bucket=bucket, Key=key, ObjectAttributes=["ETag"])
        assert error_of(err) == want
    gw_s3.put_object(Bucket=gw_bucket, Key="v", Body=b"v")
    assert gw_s3.get_object_attributes(Bucket=gw_bucket, Key="v", VersionId="null",
                                       ObjectAttributes=["ObjectSize"])["ObjectSize"] == 1
    with pytest.raises(ClientError) as err:
        gw_s3.get_object_attributes(Bucket=gw_bucket, Key="v", VersionId="3HL4kqtJlcpXroDTDmJ",
                                    ObjectAttributes=["ObjectSize"])
    assert error_of(err) == (501, "NotImplemented")
    r = signed("PUT", f"{gateway.endpoint}/{gw_bucket}/{quote('v')}?attributes", body=b"x",
               headers={"x-amz-object-attributes": "ETag"})
    assert r.status == 501  # only GET reads attributes: nothing was written
    assert gw_s3.get_object(Bucket=gw_bucket, Key="v")["Body"].read() == b"v"
