"""S3's conditional deletes, with boto3 over HTTP: DeleteObject's ``x-amz-if-match-size`` and
``x-amz-if-match-last-modified-time``, a DeleteObjects entry's ``ETag``, ``LastModifiedTime`` and
``Size``, and AbortMultipartUpload's ``x-amz-if-match-initiated-time``. Each was ignored, so a
delete the client made conditional deleted whatever was there; now a demand that does not hold
is 412 PreconditionFailed (in DeleteObjects, that entry's error) and nothing is deleted."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.gateway.badinput import error_of, signed
from tests.gateway.conftest import Gateway

LONG_AGO = datetime.datetime(2001, 1, 1, tzinfo=datetime.UTC)


def _exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        return False
    return True


def test_delete_object_demands(gateway: Gateway, gw_s3: Any, gw_bucket: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"12345")
    modified = gw_s3.head_object(Bucket=gw_bucket, Key="k")["LastModified"]
    for wrong in ({"IfMatchSize": 4}, {"IfMatchLastModifiedTime": LONG_AGO},
                  {"IfMatchSize": 5, "IfMatchLastModifiedTime": LONG_AGO}):
        with pytest.raises(ClientError) as exc:
            gw_s3.delete_object(Bucket=gw_bucket, Key="k", **wrong)
        assert error_of(exc) == (412, "PreconditionFailed"), wrong
        assert _exists(gw_s3, gw_bucket, "k")
    url = f"{gateway.endpoint}/{gw_bucket}/k"
    for header, value in (("x-amz-if-match-size", "five"),
                          ("x-amz-if-match-last-modified-time", "yesterday")):
        r = signed("DELETE", url, headers={header: value})
        assert (r.status, r.code) == (400, "InvalidArgument"), r.body[:300]
        assert _exists(gw_s3, gw_bucket, "k")
    gw_s3.delete_object(Bucket=gw_bucket, Key="k", IfMatchSize=5,
                        IfMatchLastModifiedTime=modified)
    assert not _exists(gw_s3, gw_bucket, "k")
    # nothing there: the size and time demands hold, as S3 answers (204)
    gw_s3.delete_object(Bucket=gw_bucket, Key="k", IfMatchSize=5)


def test_delete_objects_entry_demands(gw_s3: Any, gw_bucket: str) -> None:
    for key in "abcdef":
        gw_s3.put_object(Bucket=gw_bucket, Key=key, Body=b"body")
    head = gw_s3.head_object(Bucket=gw_bucket, Key="b")
    modified = gw_s3.head_object(Bucket=gw_bucket, Key="d")["LastModified"]
    got = gw_s3.delete_objects(Bucket=gw_bucket, Delete={"Objects": [
        {"Key": "a", "ETag": '"00000000000000000000000000000000"'},
        {"Key": "b", "ETag": head["ETag"]},
        {"Key": "c", "Size": 3},
        {"Key": "d", "LastModifiedTime": modified, "Size": 4},
        {"Key": "e"},
        {"Key": "f", "LastModifiedTime": LONG_AGO},
        {"Key": "absent", "ETag": head["ETag"]},
    ]})
    errors = {e["Key"]: e["Code"] for e in got.get("Errors", [])}
    assert errors == {"a": "PreconditionFailed", "c": "PreconditionFailed",
                      "f": "PreconditionFailed", "absent": "PreconditionFailed"}
    assert sorted(d["Key"] for d in got["Deleted"]) == ["b", "d", "e"]
    assert [k for k in "abcdef" if _exists(gw_s3, gw_bucket, k)] == ["a", "c", "f"]


def test_abort_demands_the_upload_s_initiated_time(gw_s3: Any, gw_bucket: str) -> None:
    up = gw_s3.create_multipart_upload(Bucket=gw_bucket, Key="mpu")["UploadId"]
    with pytest.raises(ClientError) as exc:
        gw_s3.abort_multipart_upload(Bucket=gw_bucket, Key="mpu", UploadId=up,
                                     IfMatchInitiatedTime=LONG_AGO)
    assert error_of(exc) == (412, "PreconditionFailed")
    [listed] = gw_s3.list_multipart_uploads(Bucket=gw_bucket)["Uploads"]
    gw_s3.abort_multipart_upload(Bucket=gw_bucket, Key="mpu", UploadId=up,
                                 IfMatchInitiatedTime=listed["Initiated"])
    assert gw_s3.list_multipart_uploads(Bucket=gw_bucket).get("Uploads", []) == []
