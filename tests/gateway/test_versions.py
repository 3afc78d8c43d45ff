"""The versions of a bucket whose versioning was never enabled, with boto3 on a real gateway:
ListObjectVersions lists every object as its one version (``null``), DeleteObjects deletes an
object named with ``VersionId=null`` and refuses, per key, any other version without touching
the object, and boto3's idiom for emptying a bucket (``bucket.object_versions.delete()``)
works. The answers are parsed by botocore, as any S3 SDK would parse them."""

from __future__ import annotations

import hashlib
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.gateway.badinput import error_of
from tests.gateway.conftest import GW_ACCESS, GW_SECRET, Gateway
from tests.support.s3server import REGION

pytestmark = pytest.mark.usefixtures("no_server_errors")

KEYS = ["a", "dir/x", "dir/y", "k", "z&<1>", "zz"]
#: an S3-shaped version id: the gateway keeps no such version
OTHER_VERSION = "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"


@pytest.fixture
def filled(gw_s3: Any, gw_bucket: str) -> str:
    for key in KEYS:
        gw_s3.put_object(Bucket=gw_bucket, Key=key, Body=key.encode() * 3)
    return gw_bucket


def test_every_object_is_its_null_version(gw_s3: Any, filled: str) -> None:
    got = gw_s3.list_object_versions(Bucket=filled)
    listed = gw_s3.list_objects_v2(Bucket=filled)["Contents"]
    assert [v["Key"] for v in got["Versions"]] == KEYS
    for version, obj in zip(got["Versions"], listed, strict=True):
        assert (version["VersionId"], version["IsLatest"]) == ("null", True)
        assert version["ETag"] == obj["ETag"] == \
            f'"{hashlib.md5(version["Key"].encode() * 3).hexdigest()}"'
        assert (version["Size"], version["LastModified"]) == (obj["Size"], obj["LastModified"])
        assert version["Owner"]["ID"]
    assert "DeleteMarkers" not in got and got["IsTruncated"] is False
    # the one version is what GET and HEAD with versionId=null answer
    assert gw_s3.get_object(Bucket=filled, Key="k", VersionId="null")["Body"].read() == b"kkk"


def test_prefix_delimiter_and_pages(gw_s3: Any, filled: str) -> None:
    got = gw_s3.list_object_versions(Bucket=filled, Prefix="dir/")
    assert [v["Key"] for v in got["Versions"]] == ["dir/x", "dir/y"]
    first = gw_s3.list_object_versions(Bucket=filled, Delimiter="/", MaxKeys=2)
    assert [v["Key"] for v in first["Versions"]] == ["a"]
    assert [p["Prefix"] for p in first["CommonPrefixes"]] == ["dir/"]
    assert (first["IsTruncated"], first["NextKeyMarker"], first["NextVersionIdMarker"]) == \
        (True, "dir/", "null")
    # the next page starts after the common prefix: nothing under it again
    rest = gw_s3.list_object_versions(Bucket=filled, Delimiter="/", KeyMarker="dir/",
                                      VersionIdMarker="null")
    assert [v["Key"] for v in rest["Versions"]] == ["k", "z&<1>", "zz"]
    assert rest["IsTruncated"] is False and "NextKeyMarker" not in rest
    pages = gw_s3.get_paginator("list_object_versions").paginate(
        Bucket=filled, PaginationConfig={"PageSize": 1})
    assert [v["Key"] for page in pages for v in page.get("Versions", [])] == KEYS
    # asked for by the caller, botocore leaves the encoding to it (it asks for it and decodes
    # on every other call above)
    encoded = gw_s3.list_object_versions(Bucket=filled, Prefix="z&", EncodingType="url")
    assert [v["Key"] for v in encoded["Versions"]] == ["z%26%3C1%3E"]


def test_markers_only_as_s3_allows(gw_s3: Any, filled: str) -> None:
    """(A version-id marker other than ``null`` is 501: test_allow_list.py.)"""
    with pytest.raises(ClientError) as exc:
        gw_s3.list_object_versions(Bucket=filled, VersionIdMarker="null")
    assert error_of(exc) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as exc:
        gw_s3.list_object_versions(Bucket="no-such-bucket-here")
    assert error_of(exc) == (404, "NoSuchBucket")


def test_delete_objects_never_deletes_for_another_version(gw_s3: Any, filled: str) -> None:
    """A DeleteObjects entry naming a version the gateway does not keep is refused for that
    key, and the object stays: it used to be deleted as if no version had been named."""
    got = gw_s3.delete_objects(Bucket=filled, Delete={"Objects": [
        {"Key": "k", "VersionId": OTHER_VERSION}, {"Key": "a", "VersionId": "null"},
        {"Key": "zz"}]})
    assert got["Deleted"] == [{"Key": "a", "VersionId": "null"}, {"Key": "zz"}]
    [error] = got["Errors"]
    assert (error["Key"], error["VersionId"], error["Code"]) == \
        ("k", OTHER_VERSION, "NotImplemented")
    assert gw_s3.get_object(Bucket=filled, Key="k")["Body"].read() == b"kkk"
    left = [o["Key"] for o in gw_s3.list_objects_v2(Bucket=filled)["Contents"]]
    assert left == ["dir/x", "dir/y", "k", "z&<1>"]


def test_boto3_empties_a_bucket_by_its_versions(gateway: Gateway, gw_s3: Any,
                                                filled: str) -> None:
    """``bucket.object_versions.delete()`` then ``bucket.delete()``: how boto3 users (and
    tools such as Terraform's force_destroy) empty and remove a bucket."""
    s3 = boto3.resource("s3", endpoint_url=gateway.endpoint, aws_access_key_id=GW_ACCESS,
                        aws_secret_access_key=GW_SECRET, region_name=REGION)
    bucket = s3.Bucket(filled)
    assert sorted(v.object_key for v in bucket.object_versions.all()) == KEYS
    bucket.object_versions.delete()
    bucket.delete()
    assert filled not in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]
