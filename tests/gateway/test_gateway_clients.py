"""Real S3 clients against a running gateway over HTTP: boto3, the minio SDK, presigned URLs
fetched with a plain HTTP client, and the native client. Bytes read back are the bytes written.

The module's gateways run on moto and, with ``pytest --rgw``, again on Ceph RGW (the round trip
through a production S3 server's multipart uploads and ranged reads)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import minio
import pytest

from s3kv.client import S3KVClient
from tests.conftest import S3_SERVERS, s3_server_for
from tests.gateway.conftest import (
    DEFAULT_ARGS,
    GW_ACCESS,
    GW_SECRET,
    TOKEN,
    Gateway,
    backend_store,
    gateway_client,
    running_gateway,
)
from tests.support.clock import EXPIRED_BY, botocore_signs_earlier


@pytest.fixture(scope="module", params=S3_SERVERS)
def gateway(request: pytest.FixtureRequest) -> Iterator[Gateway]:
    """A gateway per backend server for this module's tests: on moto the session's default
    gateway (conftest), on RGW (--rgw) one of its own with the same settings."""
    if request.param != "rgw":
        yield request.getfixturevalue("default_gateway")
        return
    with running_gateway(backend_store(s3_server_for(request, request.param)), DEFAULT_ARGS
                         ) as gw:
        yield gw


def _code(exc: Any) -> tuple[str, int]:
    err = exc.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


# ---- boto3 ---------------------------------------------------------------------------------
def test_boto3_put_get_range_head_delete(gw_s3: Any, gw_bucket: str) -> None:
    data = os.urandom(300_000)
    put = gw_s3.put_object(Bucket=gw_bucket, Key="chain/0001", Body=data)
    assert put["ResponseMetadata"]["HTTPStatusCode"] == 200
    etag = put["ETag"]
    got = gw_s3.get_object(Bucket=gw_bucket, Key="chain/0001")
    assert got["Body"].read() == data
    assert got["ContentLength"] == len(data)
    assert got["ETag"] == etag

    part = gw_s3.get_object(Bucket=gw_bucket, Key="chain/0001", Range="bytes=1000-1999")
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert part["ContentRange"] == f"bytes 1000-1999/{len(data)}"
    assert part["Body"].read() == data[1000:2000]
    tail = gw_s3.get_object(Bucket=gw_bucket, Key="chain/0001", Range="bytes=-10")
    assert tail["Body"].read() == data[-10:]
    open_end = gw_s3.get_object(Bucket=gw_bucket, Key="chain/0001", Range="bytes=299990-")
    assert open_end["Body"].read() == data[299990:]

    head = gw_s3.head_object(Bucket=gw_bucket, Key="chain/0001")
    assert head["ContentLength"] == len(data)
    assert head["ETag"] == etag

    # last writer wins
    data2 = os.urandom(1000)
    gw_s3.put_object(Bucket=gw_bucket, Key="chain/0001", Body=data2)
    assert gw_s3.get_object(Bucket=gw_bucket, Key="chain/0001")["Body"].read() == data2

    gw_s3.delete_object(Bucket=gw_bucket, Key="chain/0001")
    with pytest.raises(gw_s3.exceptions.NoSuchKey):
        gw_s3.get_object(Bucket=gw_bucket, Key="chain/0001")
    with pytest.raises(gw_s3.exceptions.ClientError) as exc:
        gw_s3.head_object(Bucket=gw_bucket, Key="chain/0001")
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_boto3_buckets(gw_s3: Any) -> None:
    name = f"b-{uuid.uuid4().hex[:12]}"
    gw_s3.create_bucket(Bucket=name)
    assert name in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]
    gw_s3.head_bucket(Bucket=name)
    with pytest.raises(gw_s3.exceptions.ClientError) as exc:
        gw_s3.create_bucket(Bucket=name)
    assert _code(exc) == ("BucketAlreadyOwnedByYou", 409)
    gw_s3.put_object(Bucket=name, Key="k", Body=b"x")
    with pytest.raises(gw_s3.exceptions.ClientError) as exc:
        gw_s3.delete_bucket(Bucket=name)
    assert _code(exc) == ("BucketNotEmpty", 409)
    gw_s3.delete_object(Bucket=name, Key="k")
    gw_s3.delete_bucket(Bucket=name)
    assert name not in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]


def test_boto3_list_prefix_delimiter_pagination(gw_s3: Any, gw_bucket: str) -> None:
    keys = [f"a/{i:03d}" for i in range(7)] + ["b/x/1", "b/y/1", "b/z", "c"]
    for k in keys:
        gw_s3.put_object(Bucket=gw_bucket, Key=k, Body=k.encode())
    listed = gw_s3.list_objects_v2(Bucket=gw_bucket)
    assert [o["Key"] for o in listed["Contents"]] == sorted(keys)
    assert listed["KeyCount"] == len(keys)
    assert {o["Size"] for o in listed["Contents"] if o["Key"] == "c"} == {1}

    a = gw_s3.list_objects_v2(Bucket=gw_bucket, Prefix="a/")
    assert [o["Key"] for o in a["Contents"]] == [f"a/{i:03d}" for i in range(7)]

    top = gw_s3.list_objects_v2(Bucket=gw_bucket, Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["a/", "b/"]
    assert [o["Key"] for o in top["Contents"]] == ["c"]
    under_b = gw_s3.list_objects_v2(Bucket=gw_bucket, Prefix="b/", Delimiter="/")
    assert [p["Prefix"] for p in under_b["CommonPrefixes"]] == ["b/x/", "b/y/"]
    assert [o["Key"] for o in under_b["Contents"]] == ["b/z"]

    # pagination by hand: MaxKeys + ContinuationToken
    seen: list[str] = []
    kwargs: dict[str, Any] = {"Bucket": gw_bucket, "MaxKeys": 3}
    pages = 0
    while True:
        page = gw_s3.list_objects_v2(**kwargs)
        pages += 1
        assert page["KeyCount"] <= 3
        seen += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        kwargs["ContinuationToken"] = page["NextContinuationToken"]
    assert seen == sorted(keys)
    assert pages == 4
    # and with the paginator, delimiter included (common prefixes count against MaxKeys)
    got_keys: list[str] = []
    got_prefixes: list[str] = []
    for page in gw_s3.get_paginator("list_objects_v2").paginate(
            Bucket=gw_bucket, Delimiter="/", PaginationConfig={"PageSize": 1}):
        got_keys += [o["Key"] for o in page.get("Contents", [])]
        got_prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    assert got_prefixes == ["a/", "b/"]
    assert got_keys == ["c"]
    start = gw_s3.list_objects_v2(Bucket=gw_bucket, StartAfter="b/z")
    assert [o["Key"] for o in start["Contents"]] == ["c"]


def test_boto3_delete_objects(gw_s3: Any, gw_bucket: str) -> None:
    for i in range(5):
        gw_s3.put_object(Bucket=gw_bucket, Key=f"d{i}", Body=b"v")
    out = gw_s3.delete_objects(Bucket=gw_bucket, Delete={
        "Objects": [{"Key": "d0"}, {"Key": "d1"}, {"Key": "d3"}, {"Key": "never"}]})
    assert sorted(d["Key"] for d in out["Deleted"]) == ["d0", "d1", "d3", "never"]
    assert not out.get("Errors")
    left = gw_s3.list_objects_v2(Bucket=gw_bucket)
    assert [o["Key"] for o in left["Contents"]] == ["d2", "d4"]


@pytest.fixture(scope="module", params=S3_SERVERS)
def big_gateway(request: pytest.FixtureRequest) -> Any:
    """A gateway that takes 40 MiB blocks (multipart uploads become one block)."""
    args = ["--segment-size", "100MiB", "--part-size", "5MiB", "--max-block-size", "48MiB",
            "--seal-after", "0.5", "--sync-interval", "0"]
    with running_gateway(backend_store(s3_server_for(request, request.param)), args) as gw:
        yield gw


def test_boto3_upload_file_multipart(big_gateway: Gateway, tmp_path: Path) -> None:
    from boto3.s3.transfer import TransferConfig

    s3 = gateway_client(big_gateway.endpoint)
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    src = tmp_path / "blk.bin"
    data = os.urandom(40 * 1024 * 1024)
    src.write_bytes(data)
    cfg = TransferConfig(multipart_threshold=8 * 1024 * 1024, multipart_chunksize=8 * 1024 * 1024,
                         max_concurrency=4)
    s3.upload_file(str(src), bucket, "big/block", Config=cfg)
    head = s3.head_object(Bucket=bucket, Key="big/block")
    assert head["ContentLength"] == len(data)
    got = s3.get_object(Bucket=bucket, Key="big/block")["Body"].read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    # the multipart calls really ran
    text = urllib.request.urlopen(big_gateway.endpoint + "/metrics").read().decode()
    assert 'op="CompleteMultipartUpload",status="200"' in text
    assert 'op="UploadPart",status="200"' in text
    # download_file (ranged, parallel GETs) reads the same bytes
    dst = tmp_path / "back.bin"
    s3.download_file(bucket, "big/block", str(dst), Config=cfg)
    assert dst.read_bytes() == data
    s3.delete_object(Bucket=bucket, Key="big/block")


# ---- minio SDK ----------------------------------------------------------------------------
def test_minio_sdk(gateway: Gateway) -> None:
    import io

    mc = minio.Minio(gateway.endpoint.removeprefix("http://"), access_key=GW_ACCESS,
                     secret_key=GW_SECRET, secure=False, region="us-east-1")
    bucket = f"m-{uuid.uuid4().hex[:12]}"
    mc.make_bucket(bucket)
    assert mc.bucket_exists(bucket)
    blobs = {f"p/{i}": os.urandom(100_000 + i) for i in range(3)}
    for key, data in blobs.items():
        mc.put_object(bucket, key, io.BytesIO(data), len(data))
    # a body of unknown length: the SDK streams it (multipart path when large; here one part)
    mc.put_object(bucket, "q/unknown", io.BytesIO(b"z" * 70_000), -1, part_size=5 * 1024 * 1024)
    blobs["q/unknown"] = b"z" * 70_000
    for key, data in blobs.items():
        resp = mc.get_object(bucket, key)
        try:
            assert resp.read() == data
        finally:
            resp.close()
            resp.release_conn()
        st = mc.stat_object(bucket, key)
        assert st.size == len(data)
    listed = sorted(o.object_name for o in mc.list_objects(bucket, prefix="p/", recursive=True))
    assert listed == sorted(k for k in blobs if k.startswith("p/"))
    top = sorted(o.object_name for o in mc.list_objects(bucket))
    assert top == ["p/", "q/"]
    for key in blobs:
        mc.remove_object(bucket, key)
    assert list(mc.list_objects(bucket, recursive=True)) == []
    mc.remove_bucket(bucket)
    assert not mc.bucket_exists(bucket)


# ---- presigned URLs --------------------------------------------------------------------------
def test_presigned_get_with_plain_http(gw_s3: Any, gw_bucket: str) -> None:
    data = os.urandom(50_000)
    gw_s3.put_object(Bucket=gw_bucket, Key="shared/blk", Body=data)
    url = gw_s3.generate_presigned_url("get_object", Params={"Bucket": gw_bucket,
                                                             "Key": "shared/blk"}, ExpiresIn=300)
    assert "X-Amz-Signature=" in url
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.read() == data


def test_presigned_get_expired(gw_s3: Any, gw_bucket: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="shared/old", Body=b"secret bytes")
    with botocore_signs_earlier(EXPIRED_BY + 1):  # valid for 1 s, EXPIRED_BY s ago
        url = gw_s3.generate_presigned_url("get_object", Params={"Bucket": gw_bucket,
                                                                 "Key": "shared/old"},
                                           ExpiresIn=1)
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(url, timeout=10)
    assert exc.value.code == 403
    body = exc.value.read()
    assert b"<Code>AccessDenied</Code>" in body
    assert b"secret bytes" not in body


# ---- native client -------------------------------------------------------------------------
def test_native_client(gateway: Gateway, gw_bucket: str) -> None:
    blocks = {f"h{i:04d}": os.urandom(64 * 1024 + i) for i in range(40)}
    keys = list(blocks)

    async def run() -> None:
        async with S3KVClient(gateway.endpoint, token=TOKEN) as kv:
            assert await kv.put_many(gw_bucket, blocks) == len(blocks)
            n, present = await kv.lookup(gw_bucket, [*keys[:10], "absent", *keys[10:12]])
            assert n == 10
            assert present == [True] * 10 + [False, True, True]
            assert await kv.lookup_prefix(gw_bucket, ["absent", *keys]) == 0
            got = await kv.get_many(gw_bucket, [*keys, "absent"])
            assert got[-1] is None
            assert got[:-1] == [blocks[k] for k in keys]
            await kv.flush()
            stats = await kv.stats()
            assert stats["open_segment_bytes"] == 0
            assert stats["index_entries"] >= len(blocks)
            assert stats["segments_sealed"] >= 1
            for k in ("blocks_put", "hits", "misses", "write_amplification", "sealed_segments"):
                assert k in stats
            # after the flush the blocks come from the backend (coalesced ranged reads)
            again = await kv.get_many(gw_bucket, keys)
            assert again == [blocks[k] for k in keys]
            # durable batch put: answered once sealed
            assert await kv.put_many(gw_bucket, [("dur", b"d" * 1000)], durable=True) == 1
            assert (await kv.get_many(gw_bucket, ["dur"])) == [b"d" * 1000]

    asyncio.run(run())
    # the same blocks through the S3 front
    s3 = gateway_client(gateway.endpoint)
    assert s3.get_object(Bucket=gw_bucket, Key=keys[3])["Body"].read() == blocks[keys[3]]


def test_native_client_wrong_token_and_unknown_namespace(gateway: Gateway) -> None:
    from s3kv.errors import NamespaceNotFound, RequestError

    async def run() -> None:
        async with S3KVClient(gateway.endpoint, token=f"{GW_ACCESS}:wrong") as kv:
            with pytest.raises(RequestError) as exc:
                await kv.lookup("whatever", ["a"])
            assert exc.value.status == 403
            assert exc.value.code == "AccessDenied"
        async with S3KVClient(gateway.endpoint, token=TOKEN) as kv:
            with pytest.raises(NamespaceNotFound):
                await kv.get_many("no-such-ns", ["a"])
            with pytest.raises(NamespaceNotFound):
                await kv.put_many("no-such-ns", {"a": b"x"})

    asyncio.run(run())
