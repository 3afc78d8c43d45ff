"""A check a request asks the gateway to make is made or the request is refused, never skipped:
checksums S3 defines that the gateway does not compute (MD5, SHA-512, XXHASH*) are 501 and
store nothing (they were accepted unchecked, so a corrupted body sent with one was stored), and
CompleteMultipartUpload's ``x-amz-mp-object-size`` and ``x-amz-checksum-type`` that differ from
the upload's, and an object checksum in another algorithm, are 400 with the upload left open
(all were ignored). With boto3 and raw signed requests over HTTP."""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.gateway.badinput import assert_absent, error_of, signed
from tests.gateway.conftest import Gateway

MiB = 1024 * 1024
BODY = b"what the client meant to store"


@pytest.fixture(scope="module")
def gateway(multipart_gateway: Gateway) -> Gateway:
    """This module's gateway (it replaces conftest's): blocks up to 16 MiB for multipart."""
    return multipart_gateway


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize("param,value", [
    ("ChecksumSHA512", _b64(hashlib.sha512(BODY).digest())),  # right, still not checked here
    ("ChecksumSHA512", _b64(b"\0" * 64)),
    ("ChecksumMD5", _b64(b"\0" * 16)),
    ("ChecksumXXHASH64", _b64(b"\0" * 8)),
    ("ChecksumXXHASH3", _b64(b"\0" * 8)),
    ("ChecksumXXHASH128", _b64(b"\0" * 16)),
])
def test_a_checksum_the_gateway_does_not_compute_is_refused(
        gateway: Gateway, gw_s3: Any, gw_bucket: str, param: str, value: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="kept", Body=b"old")
    for key, body in (("new", BODY), ("kept", BODY), ("new", os.urandom(6 * MiB))):
        with pytest.raises(ClientError) as exc:  # the large one would land in its segment
            gw_s3.put_object(Bucket=gw_bucket, Key=key, Body=body, **{param: value})
        assert error_of(exc) == (501, "NotImplemented")
    assert_absent(gateway, gw_bucket, "new")
    assert gw_s3.get_object(Bucket=gw_bucket, Key="kept")["Body"].read() == b"old"
    up = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="mpu")["UploadId"]
    with pytest.raises(ClientError) as exc:
        gw_s3.upload_part(Bucket=gw_bucket, Key="mpu", UploadId=up, PartNumber=1, Body=BODY,
                          **{param: value})
    assert error_of(exc) == (501, "NotImplemented")
    assert gw_s3.list_parts(Bucket=gw_bucket, Key="mpu", UploadId=up).get("Parts", []) == []


@pytest.mark.parametrize("algorithm", ["SHA512", "MD5", "XXHASH64"])
def test_an_algorithm_the_gateway_does_not_compute_is_refused(
        gateway: Gateway, gw_s3: Any, gw_bucket: str, algorithm: str) -> None:
    with pytest.raises(ClientError) as exc:
        gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="mpu", ChecksumAlgorithm=algorithm)
    assert error_of(exc) == (501, "NotImplemented")
    assert gw_s3.list_multipart_uploads(Bucket=gw_bucket).get("Uploads", []) == []
    gw_s3.put_object(Bucket=gw_bucket, Key="src", Body=BODY)
    with pytest.raises(ClientError) as exc:
        gw_s3.copy_object(Bucket=gw_bucket, Key="copy", ChecksumAlgorithm=algorithm,
                          CopySource={"Bucket": gw_bucket, "Key": "src"})
    assert error_of(exc) == (501, "NotImplemented")
    assert_absent(gateway, gw_bucket, "copy")
    url = f"{gateway.endpoint}/{gw_bucket}/trailed"
    for headers in ({"x-amz-trailer": f"x-amz-checksum-{algorithm.lower()}"},
                    {"x-amz-sdk-checksum-algorithm": algorithm}):
        r = signed("PUT", url, body=BODY, headers=headers)
        assert (r.status, r.code) == (501, "NotImplemented"), (headers, r.body[:300])
    assert_absent(gateway, gw_bucket, "trailed")


def _crc32(data: bytes) -> str:
    return _b64(zlib.crc32(data).to_bytes(4, "big"))


def test_complete_checks_what_it_is_told_of_the_object(gw_s3: Any, gw_bucket: str) -> None:
    parts = [os.urandom(5 * MiB), os.urandom(1234)]
    whole = b"".join(parts)
    up = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="obj", ChecksumAlgorithm="CRC32",
                                       ChecksumType="FULL_OBJECT")["UploadId"]
    done = []
    for n, data in enumerate(parts, start=1):
        r = gw_s3.upload_part(Bucket=gw_bucket, Key="obj", UploadId=up, PartNumber=n,
                              Body=data, ChecksumAlgorithm="CRC32")
        done.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    complete = {"Bucket": gw_bucket, "Key": "obj", "UploadId": up,
                "MultipartUpload": {"Parts": done}}
    refused = [
        ({"MpuObjectSize": len(whole) + 1}, (400, "InvalidRequest")),
        ({"ChecksumSHA256": _b64(hashlib.sha256(whole).digest())}, (400, "InvalidRequest")),
        ({"ChecksumSHA512": _b64(hashlib.sha512(whole).digest())}, (501, "NotImplemented")),
        ({"ChecksumType": "COMPOSITE"}, (400, "InvalidRequest")),  # created FULL_OBJECT
    ]
    for extra, answer in refused:
        with pytest.raises(ClientError) as exc:
            gw_s3.complete_multipart_upload(**complete, **extra)
        assert error_of(exc) == answer, extra
        listed = gw_s3.list_parts(Bucket=gw_bucket, Key="obj", UploadId=up)["Parts"]
        assert len(listed) == 2  # the upload is still open
    with pytest.raises(ClientError) as exc:
        gw_s3.head_object(Bucket=gw_bucket, Key="obj")
    assert error_of(exc)[0] == 404
    fin = gw_s3.complete_multipart_upload(**complete, MpuObjectSize=len(whole),
                                          ChecksumCRC32=_crc32(whole),
                                          ChecksumType="FULL_OBJECT")
    assert fin["ChecksumCRC32"] == _crc32(whole)
    assert gw_s3.get_object(Bucket=gw_bucket, Key="obj")["Body"].read() == whole
