"""The object's checksum sent with CompleteMultipartUpload (``x-amz-checksum-<algorithm>``, as
the SDKs send it for a FULL_OBJECT upload and may for a COMPOSITE one): it names the object
being completed, not the XML body of the request, and is checked against the object (a full
CRC of a FULL_OBJECT upload once failed as the CRC of the body: 400 BadDigest every time)."""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.gateway.conftest import Gateway

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def gateway(multipart_gateway: Gateway) -> Gateway:
    """This module's gateway (it replaces conftest's): blocks up to 16 MiB for multipart."""
    return multipart_gateway


def _upload(s3: Any, bucket: str, key: str, parts: list[bytes], algorithm: str,
            **create: Any) -> tuple[str, list[dict[str, Any]]]:
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm=algorithm,
                                    **create)
    done = []
    for n, data in enumerate(parts, start=1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"], PartNumber=n,
                           Body=data, ChecksumAlgorithm=algorithm)
        done.append({"PartNumber": n, "ETag": r["ETag"],
                     f"Checksum{algorithm}": r[f"Checksum{algorithm}"]})
    return up["UploadId"], done


def _crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_full_object_checksum_on_complete(gw_s3: Any, gw_bucket: str) -> None:
    parts = [os.urandom(5 * MiB), os.urandom(4321)]
    whole = b"".join(parts)
    upload_id, done = _upload(gw_s3, gw_bucket, "full", parts, "CRC32",
                              ChecksumType="FULL_OBJECT")
    # a wrong one: BadDigest, and the upload is still there to complete
    with pytest.raises(ClientError) as exc:
        gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="full", UploadId=upload_id,
                                        MultipartUpload={"Parts": done},
                                        ChecksumCRC32=_crc32(b"not the object"),
                                        ChecksumType="FULL_OBJECT")
    assert exc.value.response["Error"]["Code"] == "BadDigest"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    fin = gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="full", UploadId=upload_id,
                                          MultipartUpload={"Parts": done},
                                          ChecksumCRC32=_crc32(whole),
                                          ChecksumType="FULL_OBJECT")
    assert (fin["ChecksumCRC32"], fin["ChecksumType"]) == (_crc32(whole), "FULL_OBJECT")
    got = gw_s3.get_object(Bucket=gw_bucket, Key="full", ChecksumMode="ENABLED")
    assert got["Body"].read() == whole and got["ChecksumCRC32"] == _crc32(whole)


def test_composite_checksum_on_complete(gw_s3: Any, gw_bucket: str) -> None:
    parts = [os.urandom(5 * MiB), os.urandom(777)]
    upload_id, done = _upload(gw_s3, gw_bucket, "comp", parts, "SHA256")
    digests = b"".join(hashlib.sha256(p).digest() for p in parts)
    composite = base64.b64encode(hashlib.sha256(digests).digest()).decode()
    with pytest.raises(ClientError) as exc:
        gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="comp", UploadId=upload_id,
                                        MultipartUpload={"Parts": done},
                                        ChecksumSHA256=base64.b64encode(b"\0" * 32).decode())
    assert exc.value.response["Error"]["Code"] == "BadDigest"
    for sent in (composite, f"{composite}-2"):  # with the part count or without, as S3 takes
        fin = gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="comp",
                                              UploadId=upload_id,
                                              MultipartUpload={"Parts": done},
                                              ChecksumSHA256=sent)
        assert fin["ChecksumSHA256"] == f"{composite}-2"  # the repeat: the first answer
    assert gw_s3.get_object(Bucket=gw_bucket, Key="comp")["Body"].read() == b"".join(parts)


def test_complete_with_the_sdk_checksum_algorithm_header(gw_s3: Any, gw_bucket: str) -> None:
    """An SDK may name the algorithm of the checksum it sends (``x-amz-sdk-checksum-algorithm``)
    beside the object's checksum: that too is about the object, not the XML body."""
    parts = [os.urandom(5 * MiB), os.urandom(99)]
    upload_id, done = _upload(gw_s3, gw_bucket, "sdk", parts, "CRC32",
                              ChecksumType="FULL_OBJECT")

    def add(request: Any, **_: Any) -> None:
        request.headers["x-amz-sdk-checksum-algorithm"] = "CRC32"

    gw_s3.meta.events.register("before-sign.s3.CompleteMultipartUpload", add)
    try:
        fin = gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="sdk", UploadId=upload_id,
                                              MultipartUpload={"Parts": done},
                                              ChecksumCRC32=_crc32(b"".join(parts)),
                                              ChecksumType="FULL_OBJECT")
    finally:
        gw_s3.meta.events.unregister("before-sign.s3.CompleteMultipartUpload", add)
    assert fin["ChecksumCRC32"] == _crc32(b"".join(parts))
