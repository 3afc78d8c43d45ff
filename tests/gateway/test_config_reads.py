"""Reads of the configurations the gateway never keeps (s3kv/gateway/s3_configs.py), with boto3
over HTTP: each answers what S3 answers for a bucket or object without one (S3 tools that show
or copy a bucket's settings, or an object's tags, read them), ACLs read as the canned private,
the only one accepted, and setting any is still 501."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.gateway.badinput import error_of

#: boto3 method -> S3's error code for a bucket without that configuration
ABSENT = {
    "get_bucket_lifecycle_configuration": "NoSuchLifecycleConfiguration",
    "get_bucket_lifecycle": "NoSuchLifecycleConfiguration",  # the deprecated read, same request
    "get_bucket_policy": "NoSuchBucketPolicy",
    "get_bucket_cors": "NoSuchCORSConfiguration",
    "get_bucket_tagging": "NoSuchTagSet",
    "get_bucket_encryption": "ServerSideEncryptionConfigurationNotFoundError",
    "get_bucket_website": "NoSuchWebsiteConfiguration",
    "get_bucket_replication": "ReplicationConfigurationNotFoundError",
    "get_object_lock_configuration": "ObjectLockConfigurationNotFoundError",
    "get_public_access_block": "NoSuchPublicAccessBlockConfiguration",
    "get_bucket_ownership_controls": "OwnershipControlsNotFoundError",
    "get_bucket_policy_status": "NoSuchBucketPolicy",
}
EMPTY = ["get_bucket_versioning", "get_bucket_logging", "get_bucket_notification_configuration",
         "get_bucket_accelerate_configuration", "get_bucket_request_payment"]


def _fields(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "ResponseMetadata"}


@pytest.mark.parametrize("method", sorted(ABSENT))
def test_a_configuration_never_kept_reads_as_absent(gw_s3: Any, gw_bucket: str,
                                                    method: str) -> None:
    with pytest.raises(ClientError) as exc:
        getattr(gw_s3, method)(Bucket=gw_bucket)
    assert error_of(exc) == (404, ABSENT[method])


def test_configurations_s3_reads_back_empty(gw_s3: Any, gw_bucket: str) -> None:
    """Versioning never enabled, no logging, no notifications, no acceleration, and the
    bucket owner pays: the documents S3 gives for a bucket that never had them."""
    assert _fields(gw_s3.get_bucket_versioning(Bucket=gw_bucket)) == {}
    assert _fields(gw_s3.get_bucket_logging(Bucket=gw_bucket)) == {}
    assert _fields(gw_s3.get_bucket_notification_configuration(Bucket=gw_bucket)) == {}
    assert _fields(gw_s3.get_bucket_accelerate_configuration(Bucket=gw_bucket)) == {}
    assert _fields(gw_s3.get_bucket_request_payment(Bucket=gw_bucket)) == {
        "Payer": "BucketOwner"}


@pytest.mark.parametrize("method", sorted(ABSENT) + EMPTY)
def test_a_bucket_that_does_not_exist_is_no_such_bucket(gw_s3: Any, method: str) -> None:
    with pytest.raises(ClientError) as exc:
        getattr(gw_s3, method)(Bucket=f"missing-{uuid.uuid4().hex[:12]}")
    assert error_of(exc) == (404, "NoSuchBucket")


def test_an_object_has_no_tags(gw_s3: Any, gw_bucket: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"body")
    assert _fields(gw_s3.get_object_tagging(Bucket=gw_bucket, Key="k")) == {"TagSet": []}
    got = gw_s3.get_object_tagging(Bucket=gw_bucket, Key="k", VersionId="null")
    assert got["TagSet"] == []
    with pytest.raises(ClientError) as exc:
        gw_s3.get_object_tagging(Bucket=gw_bucket, Key="k", VersionId="3HL4kqtJlcpXroDTDmJ")
    assert error_of(exc) == (501, "NotImplemented")
    with pytest.raises(ClientError) as exc:
        gw_s3.get_object_tagging(Bucket=gw_bucket, Key="absent")
    assert error_of(exc) == (404, "NoSuchKey")


def _private(answer: dict[str, Any]) -> bool:
    owner = answer["Owner"]["ID"]
    return [(g["Grantee"]["Type"], g["Grantee"]["ID"], g["Permission"])
            for g in answer["Grants"]] == [("CanonicalUser", owner, "FULL_CONTROL")]


def test_acls_read_as_private(gw_s3: Any, gw_bucket: str) -> None:
    """The canned ACL ``private`` (the owner has full control), the only one accepted on a
    write; the owner is the one listings name."""
    gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"body", ACL="private")
    owner = gw_s3.list_objects(Bucket=gw_bucket)["Contents"][0]["Owner"]["ID"]
    for answer in (gw_s3.get_bucket_acl(Bucket=gw_bucket),
                   gw_s3.get_object_acl(Bucket=gw_bucket, Key="k"),
                   gw_s3.get_object_acl(Bucket=gw_bucket, Key="k", VersionId="null")):
        assert answer["Owner"]["ID"] == owner and _private(answer), answer
    with pytest.raises(ClientError) as exc:
        gw_s3.get_object_acl(Bucket=gw_bucket, Key="absent")
    assert error_of(exc) == (404, "NoSuchKey")
    with pytest.raises(ClientError) as exc:
        gw_s3.get_bucket_acl(Bucket=f"missing-{uuid.uuid4().hex[:12]}")
    assert error_of(exc) == (404, "NoSuchBucket")
    for call in (lambda: gw_s3.put_bucket_acl(Bucket=gw_bucket, ACL="public-read"),
                 lambda: gw_s3.put_object_acl(Bucket=gw_bucket, Key="k", ACL="private")):
        with pytest.raises(ClientError) as exc:
            call()
        assert error_of(exc) == (501, "NotImplemented")


@pytest.mark.parametrize("call", [
    lambda s3, b: s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={
        "Rules": [{"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""},
                   "Expiration": {"Days": 1}}]}),
    lambda s3, b: s3.put_bucket_policy(Bucket=b, Policy='{"Version": "2012-10-17"}'),
    lambda s3, b: s3.put_bucket_encryption(Bucket=b, ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}),
    lambda s3, b: s3.put_bucket_cors(Bucket=b, CORSConfiguration={"CORSRules": [
        {"AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}]}),
    lambda s3, b: s3.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={
        "BlockPublicAcls": True}),
    lambda s3, b: s3.put_bucket_logging(Bucket=b, BucketLoggingStatus={}),
    lambda s3, b: s3.delete_bucket_policy(Bucket=b),
    lambda s3, b: s3.delete_bucket_lifecycle(Bucket=b),
], ids=["lifecycle", "policy", "encryption", "cors", "public-access-block", "logging",
        "delete-policy", "delete-lifecycle"])
def test_setting_a_configuration_is_still_refused(gw_s3: Any, gw_bucket: str,
                                                  call: Any) -> None:
    with pytest.raises(ClientError) as exc:
        call(gw_s3, gw_bucket)
    assert error_of(exc) == (501, "NotImplemented")
    for method, code in ABSENT.items():  # and every read still says there is none
        with pytest.raises(ClientError) as exc:
            getattr(gw_s3, method)(Bucket=gw_bucket)
        assert error_of(exc) == (404, code)


@pytest.mark.parametrize("config", [
    {"Tags": [{"Key": "team", "Value": "kv"}]},
    {"Location": {"Type": "AvailabilityZone", "Name": "use1-az4"},
     "Bucket": {"Type": "Directory", "DataRedundancy": "SingleAvailabilityZone"}},
], ids=["tags", "directory-bucket"])
def test_a_bucket_configuration_the_gateway_cannot_keep_is_refused(gw_s3: Any,
                                                                   config: Any) -> None:
    """Bucket tags and a directory bucket asked for at creation were dropped, and a plain
    bucket made: now 501 and no bucket."""
    name = f"cfg-{uuid.uuid4().hex[:12]}"
    with pytest.raises(ClientError) as exc:
        gw_s3.create_bucket(Bucket=name, CreateBucketConfiguration=config)
    assert error_of(exc) == (501, "NotImplemented")
    assert name not in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]
