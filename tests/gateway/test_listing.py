"""Listings against a running gateway with boto3's own paginators: ListObjects v1 (marker,
NextMarker with a delimiter, encoding-type=url), ListObjectsV2 (max-keys=0, start-after,
fetch-owner), ListBuckets (max-buckets, continuation-token), and bucket names S3 refuses."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from s3kv.frames import encode_frames
from tests.gateway.badinput import send, signed
from tests.gateway.conftest import TOKEN, Gateway


def batch_put(gateway: Gateway, bucket: str, items: list[tuple[str, bytes]]) -> None:
    """Many small objects through the native batch put (one request per 1000)."""
    for i in range(0, len(items), 1000):
        body = b"".join(encode_frames(items[i:i + 1000]))
        r = send("POST", f"{gateway.endpoint}/v1/{bucket}/batch-put", body=body,
                 headers={"Authorization": "Bearer " + TOKEN})
        assert r.status == 200, r.body[:300]


def test_v1_paginator_over_2500_keys(gateway: Gateway, gw_s3: Any, gw_bucket: str) -> None:
    keys = [f"k/{i:05d}" for i in range(2500)]
    batch_put(gateway, gw_bucket, [(k, b"v") for k in keys])
    pages = list(gw_s3.get_paginator("list_objects").paginate(Bucket=gw_bucket))
    got = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert got == keys  # every key once, in order, and the paginator stopped
    assert len(pages) == 3 and [p["IsTruncated"] for p in pages] == [True, True, False]
    assert pages[1]["Marker"] == keys[999]
    # small pages with max-keys, through the marker the paginator takes from the last key
    pages = list(gw_s3.get_paginator("list_objects").paginate(
        Bucket=gw_bucket, Prefix="k/0000", PaginationConfig={"PageSize": 3}))
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == keys[:10]
    assert all("NextMarker" not in p for p in pages)  # S3 gives NextMarker only with a delimiter


def test_v1_delimiter_next_marker(gateway: Gateway, gw_s3: Any, gw_bucket: str) -> None:
    keys = sorted([f"d{i % 4}/k{i}" for i in range(40)] + [f"top{i}" for i in range(5)])
    batch_put(gateway, gw_bucket, [(k, b"x") for k in keys])
    pages = list(gw_s3.get_paginator("list_objects").paginate(
        Bucket=gw_bucket, Delimiter="/", PaginationConfig={"PageSize": 2}))
    prefixes = [c["Prefix"] for p in pages for c in p.get("CommonPrefixes", [])]
    tops = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert prefixes == ["d0/", "d1/", "d2/", "d3/"]  # each once, though many keys share them
    assert tops == [f"top{i}" for i in range(5)]
    truncated = [p for p in pages if p["IsTruncated"]]
    assert truncated and all("NextMarker" in p for p in truncated)
    assert pages[0]["NextMarker"] == "d1/"


def test_v1_and_v2_url_encoding(gateway: Gateway, gw_s3: Any, gw_bucket: str) -> None:
    odd = ["a b/ü+c", "a b/x&y<z>", "plain"]
    for k in odd:
        gw_s3.put_object(Bucket=gw_bucket, Key=k, Body=b"1")
    # boto3 asks for encoding-type=url and decodes the answer
    # a marker that is a common prefix skips every key under it (how NextMarker pages)
    v1 = gw_s3.list_objects(Bucket=gw_bucket, Marker="a b/", MaxKeys=1, Delimiter="/")
    assert v1["Marker"] == "a b/" and v1["IsTruncated"] is False
    assert [o["Key"] for o in v1["Contents"]] == ["plain"] and "CommonPrefixes" not in v1
    first = gw_s3.list_objects(Bucket=gw_bucket, MaxKeys=1, Delimiter="/")
    assert first["CommonPrefixes"] == [{"Prefix": "a b/"}] and first["NextMarker"] == "a b/"
    all_v1 = gw_s3.list_objects(Bucket=gw_bucket)
    assert sorted(o["Key"] for o in all_v1["Contents"]) == sorted(odd)
    r = signed("GET", f"{gateway.endpoint}/{gw_bucket}?encoding-type=url&prefix=a%20b%2F")
    assert b"<Key>a%20b/%C3%BC%2Bc</Key>" in r.body and b"<Prefix>a%20b/</Prefix>" in r.body
    v2 = gw_s3.list_objects_v2(Bucket=gw_bucket, StartAfter="a b/x&y<z>")
    assert [o["Key"] for o in v2["Contents"]] == ["a b/ü+c", "plain"]


def test_v2_max_keys_zero_and_fetch_owner(gw_s3: Any, gw_bucket: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="a", Body=b"1")
    zero = gw_s3.list_objects_v2(Bucket=gw_bucket, MaxKeys=0)
    assert zero["IsTruncated"] is False and zero["KeyCount"] == 0
    assert "NextContinuationToken" not in zero and "Contents" not in zero
    assert gw_s3.list_objects(Bucket=gw_bucket, MaxKeys=0)["IsTruncated"] is False
    plain = gw_s3.list_objects_v2(Bucket=gw_bucket)
    assert "Owner" not in plain["Contents"][0]
    owned = gw_s3.list_objects_v2(Bucket=gw_bucket, FetchOwner=True)
    assert owned["Contents"][0]["Owner"] == {"ID": "s3kv", "DisplayName": "s3kv"}
    assert gw_s3.list_objects(Bucket=gw_bucket)["Contents"][0]["Owner"]["ID"] == "s3kv"


def test_list_buckets_pagination(gateway: Gateway, gw_s3: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    names = sorted(f"lb-{tag}-{i}" for i in range(5))
    for n in names:
        gw_s3.create_bucket(Bucket=n)
    first = gw_s3.list_buckets(Prefix=f"lb-{tag}-", MaxBuckets=2)
    assert [b["Name"] for b in first["Buckets"]] == names[:2]
    assert first["Prefix"] == f"lb-{tag}-" and first["ContinuationToken"]
    seen = [b["Name"] for p in gw_s3.get_paginator("list_buckets").paginate(
        Prefix=f"lb-{tag}-", PaginationConfig={"PageSize": 2}) for b in p["Buckets"]]
    assert seen == names
    last = gw_s3.list_buckets(Prefix=f"lb-{tag}-", MaxBuckets=5)
    assert "ContinuationToken" not in last and len(last["Buckets"]) == 5
    assert gw_s3.list_buckets(BucketRegion="eu-west-1", Prefix=f"lb-{tag}")["Buckets"] == []
    for bad in ("0", "-1", "x", "10001"):  # boto3 refuses these itself: sent raw
        r = signed("GET", f"{gateway.endpoint}/?max-buckets={bad}")
        assert (r.status, r.code) == (400, "InvalidArgument")


@pytest.mark.parametrize("name", ["192.168.5.123", "10.0.0.1", "127.0.0.1"])
def test_ip_address_bucket_names_refused(gw_s3: Any, name: str) -> None:
    with pytest.raises(ClientError) as exc:
        gw_s3.create_bucket(Bucket=name)
    assert exc.value.response["Error"]["Code"] == "InvalidBucketName"
    assert name not in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]
    gw_s3.create_bucket(Bucket=f"ip-{name}-x")  # dotted, but not an address: fine


@pytest.mark.parametrize("form", ["xn--{}", "sthree-{}", "amzn-s3-demo-{}", "{}-s3alias",
                                  "{}--ol-s3", "{}.mrap", "{}--x-s3", "{}--table-s3"])
def test_bucket_names_s3_reserves_refused(gateway: Gateway, gw_s3: Any, form: str) -> None:
    """The prefixes and suffixes S3's bucket naming rules reserve (punycode labels, access
    point and Multi-Region Access Point aliases, directory and table buckets) are
    400 InvalidBucketName on CreateBucket, as on S3 (the gateway created them: 200). Sent raw:
    botocore treats a ``--x-s3`` name as a directory bucket. The same words elsewhere in a name
    are fine."""
    tag = uuid.uuid4().hex[:8]
    name = form.format(tag)
    r = signed("PUT", f"{gateway.endpoint}/{name}")
    assert (r.status, r.code) == (400, "InvalidBucketName"), r.body[:300]
    assert name not in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]
    ok = form.format(tag).replace("--", "-").replace(".mrap", "-mrap").replace("sthree", "s3") \
        .replace("amzn-", "amzn") + "-x"
    assert signed("PUT", f"{gateway.endpoint}/{ok}").status == 200, ok


def test_delimiter_listing_past_more_keys_than_one_batch(gateway: Gateway, gw_s3: Any,
                                                         gw_bucket: str) -> None:
    """The store is read in batches of 1000 keys (s3_listing.BATCH): a common prefix over
    more keys than a batch, then others after it, each listed once and in order."""
    keys = [f"big/{i:05d}" for i in range(2500)] + [f"mid/{i}" for i in range(3)] + \
        [f"top{i}" for i in range(3)] + [f"zz/{i:05d}" for i in range(1200)]
    batch_put(gateway, gw_bucket, [(k, b"x") for k in keys])
    for size in (1, 2, 1000):
        pages = list(gw_s3.get_paginator("list_objects_v2").paginate(
            Bucket=gw_bucket, Delimiter="/", PaginationConfig={"PageSize": size}))
        assert [c["Prefix"] for p in pages for c in p.get("CommonPrefixes", [])] == \
            ["big/", "mid/", "zz/"]
        assert [o["Key"] for p in pages for o in p.get("Contents", [])] == \
            [f"top{i}" for i in range(3)]
    pages = list(gw_s3.get_paginator("list_objects_v2").paginate(Bucket=gw_bucket,
                                                                  Prefix="zz/"))
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == keys[-1200:]
