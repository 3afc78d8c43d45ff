"""ListParts and ListMultipartUploads (s3kv/gateway/multipart_listing.py) with boto3 on a real
gateway process: pages, markers, prefixes and delimiters, checksums, and what completing or
aborting an upload takes off the lists. The answers are parsed by botocore, as any S3 SDK
would parse them."""

from __future__ import annotations

import base64
import hashlib
import uuid
import zlib
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.gateway.badinput import error_of

pytestmark = pytest.mark.usefixtures("no_server_errors")


def test_list_parts_pages_and_checksums(gw_s3: Any, gw_bucket: str) -> None:
    up = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="k", ChecksumAlgorithm="CRC32")
    uid = up["UploadId"]
    bodies = {n: bytes([n]) * (1000 + n) for n in (3, 1, 7, 2)}  # uploaded out of order
    for n, body in bodies.items():
        gw_s3.upload_part(Bucket=gw_bucket, Key="k", UploadId=uid, PartNumber=n, Body=body,
                          ChecksumAlgorithm="CRC32")
    got = gw_s3.list_parts(Bucket=gw_bucket, Key="k", UploadId=uid)
    assert [p["PartNumber"] for p in got["Parts"]] == [1, 2, 3, 7]
    for p in got["Parts"]:
        body = bodies[p["PartNumber"]]
        assert p["Size"] == len(body)
        assert p["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
        crc = zlib.crc32(body).to_bytes(4, "big")
        assert p["ChecksumCRC32"] == base64.b64encode(crc).decode()
    assert (got["IsTruncated"], got["ChecksumAlgorithm"], got["StorageClass"]) == \
        (False, "CRC32", "STANDARD")
    first = gw_s3.list_parts(Bucket=gw_bucket, Key="k", UploadId=uid, MaxParts=2)
    assert [p["PartNumber"] for p in first["Parts"]] == [1, 2] and first["IsTruncated"]
    rest = gw_s3.list_parts(Bucket=gw_bucket, Key="k", UploadId=uid,
                            PartNumberMarker=first["NextPartNumberMarker"])
    assert [p["PartNumber"] for p in rest["Parts"]] == [3, 7] and not rest["IsTruncated"]
    gw_s3.abort_multipart_upload(Bucket=gw_bucket, Key="k", UploadId=uid)
    with pytest.raises(ClientError) as exc:
        gw_s3.list_parts(Bucket=gw_bucket, Key="k", UploadId=uid)
    assert error_of(exc) == (404, "NoSuchUpload")
    with pytest.raises(ClientError) as exc:  # another key's id is not this key's upload
        other = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="other")["UploadId"]
        gw_s3.list_parts(Bucket=gw_bucket, Key="k", UploadId=other)
    assert error_of(exc) == (404, "NoSuchUpload")


def _uploads(s3: Any, bucket: str, **kw: Any) -> tuple[list[tuple[str, str]], list[str], Any]:
    got = s3.list_multipart_uploads(Bucket=bucket, **kw)
    ups = [(u["Key"], u["UploadId"]) for u in got.get("Uploads", [])]
    return ups, [p["Prefix"] for p in got.get("CommonPrefixes", [])], got


def test_list_uploads_in_order_with_markers_and_prefixes(gw_s3: Any, gw_bucket: str) -> None:
    keys = ["b", "a/1", "a/2", "c", "b", "a/1"]  # two keys with two uploads each
    ids = [gw_s3.create_multipart_upload(Bucket=gw_bucket, Key=k)["UploadId"] for k in keys]
    want = [("a/1", ids[1]), ("a/1", ids[5]), ("a/2", ids[2]), ("b", ids[0]), ("b", ids[4]),
            ("c", ids[3])]  # by key, then oldest first
    ups, prefixes, got = _uploads(gw_s3, gw_bucket)
    assert (ups, prefixes, got["IsTruncated"]) == (want, [], False)
    assert all(u["Initiator"]["ID"] and u["StorageClass"] == "STANDARD"
               for u in got["Uploads"])
    # pages of two, following NextKeyMarker / NextUploadIdMarker, give the same list
    seen: list[tuple[str, str]] = []
    markers: dict[str, str] = {}
    while True:
        ups, _, got = _uploads(gw_s3, gw_bucket, MaxUploads=2, **markers)
        seen += ups
        if not got["IsTruncated"]:
            break
        markers = {"KeyMarker": got["NextKeyMarker"],
                   "UploadIdMarker": got["NextUploadIdMarker"]}
    assert seen == want
    # a key marker alone starts after every upload of that key
    assert _uploads(gw_s3, gw_bucket, KeyMarker="a/1")[0] == want[2:]
    # prefix and delimiter: a/ rolls up into one common prefix
    ups, prefixes, _ = _uploads(gw_s3, gw_bucket, Delimiter="/")
    assert (ups, prefixes) == (want[3:], ["a/"])
    assert _uploads(gw_s3, gw_bucket, Prefix="a/")[0] == want[:3]
    # completing or aborting takes an upload off the list
    gw_s3.abort_multipart_upload(Bucket=gw_bucket, Key="c", UploadId=ids[3])
    part = gw_s3.upload_part(Bucket=gw_bucket, Key="b", UploadId=ids[0], PartNumber=1,
                             Body=b"last")
    gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="b", UploadId=ids[0], MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert _uploads(gw_s3, gw_bucket)[0] == [w for w in want if w[1] not in (ids[0], ids[3])]
    # another bucket's uploads are not listed; a missing bucket is 404
    gw_s3.create_bucket(Bucket=gw_bucket + "-2")
    elsewhere = gw_s3.create_multipart_upload(Bucket=gw_bucket + "-2", Key="b")["UploadId"]
    assert _uploads(gw_s3, gw_bucket + "-2")[0] == [("b", elsewhere)]
    assert elsewhere not in {u for _, u in _uploads(gw_s3, gw_bucket)[0]}
    with pytest.raises(ClientError) as exc:
        gw_s3.list_multipart_uploads(Bucket=f"none-{uuid.uuid4().hex[:8]}")
    assert error_of(exc) == (404, "NoSuchBucket")


def test_list_uploads_encodes_keys_on_request(gw_s3: Any, gw_bucket: str) -> None:
    uid = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="sp ace/é")["UploadId"]
    got = gw_s3.list_multipart_uploads(Bucket=gw_bucket, EncodingType="url")
    # asked for by the caller (not by botocore), the keys stay encoded in what it returns
    assert [(u["Key"], u["UploadId"]) for u in got["Uploads"]] == [("sp%20ace/%C3%A9", uid)]
    assert got["EncodingType"] == "url"
    with pytest.raises(ClientError) as exc:
        gw_s3.list_multipart_uploads(Bucket=gw_bucket, MaxUploads=-1)
    assert error_of(exc) == (400, "InvalidArgument")


def test_deleting_a_bucket_takes_its_uploads(gw_s3: Any, gw_bucket: str) -> None:
    """DeleteBucket with an upload in progress (S3 and RGW allow it: an upload is no object)
    takes the upload with it: its parts, lists and Complete are the bucket's 404 NoSuchBucket,
    and a bucket created again under that name has no uploads. Before, the upload outlived its
    bucket in the gateway's memory: ListParts and UploadPart answered 200 on the deleted bucket,
    and in the new bucket ListMultipartUploads listed it and its Complete stored the object."""
    b, key = gw_bucket, "k"
    uid = gw_s3.create_multipart_upload(Bucket=b, Key=key)["UploadId"]
    etag = gw_s3.upload_part(Bucket=b, Key=key, UploadId=uid, PartNumber=1, Body=b"p")["ETag"]
    parts = {"Parts": [{"PartNumber": 1, "ETag": etag}]}
    gw_s3.delete_bucket(Bucket=b)
    calls = [lambda: gw_s3.list_parts(Bucket=b, Key=key, UploadId=uid),
             lambda: gw_s3.upload_part(Bucket=b, Key=key, UploadId=uid, PartNumber=2, Body=b"q"),
             lambda: gw_s3.abort_multipart_upload(Bucket=b, Key=key, UploadId=uid),
             lambda: gw_s3.complete_multipart_upload(Bucket=b, Key=key, UploadId=uid,
                                                     MultipartUpload=parts)]
    for call in calls:
        with pytest.raises(ClientError) as info:
            call()
        assert error_of(info) == (404, "NoSuchBucket")
    gw_s3.create_bucket(Bucket=b)
    assert "Uploads" not in gw_s3.list_multipart_uploads(Bucket=b)
    with pytest.raises(ClientError) as info:
        gw_s3.complete_multipart_upload(Bucket=b, Key=key, UploadId=uid, MultipartUpload=parts)
    assert error_of(info) == (404, "NoSuchUpload")
    assert "Contents" not in gw_s3.list_objects_v2(Bucket=b)
