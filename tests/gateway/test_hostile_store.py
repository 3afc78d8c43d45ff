"""A gateway restarted over a bucket whose store objects another tool rewrote with right
checksums (tests/store/test_hostile_manifests.py has the cases one by one): it starts, and its
S3 GETs answer the bytes that were written, never a length they do not have."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from s3kv.store import layout
from tests.conftest import make_s3_client
from tests.gateway.conftest import SMALL, Gateway, gateway_client, running_gateway, store_stats
from tests.support.s3server import MotoServer


@pytest.fixture
def fresh(s3_server: MotoServer) -> Iterator[tuple[Gateway, Any, str]]:
    """A gateway of its own on a fresh backend bucket (prefix ``kv/``), that bucket's raw S3
    client, and the bucket."""
    bucket = f"gw-{uuid.uuid4().hex[:12]}"
    raw = make_s3_client(s3_server.endpoint)
    raw.create_bucket(Bucket=bucket)
    with running_gateway(f"s3://{bucket}/kv?endpoint={s3_server.endpoint}", SMALL) as gw:
        yield gw, raw, bucket


def rewrite_sidecar(raw: Any, bucket: str, edit: Any) -> None:
    ((key,),) = [[o["Key"] for o in raw.list_objects_v2(Bucket=bucket,
                                                         Prefix="kv/manifests/")["Contents"]]]
    manifest = layout.Manifest.decode(raw.get_object(Bucket=bucket, Key=key)["Body"].read())
    manifest.entries = [edit(e) for e in manifest.entries]
    raw.put_object(Bucket=bucket, Key=key, Body=manifest.encode())


@pytest.mark.parametrize("lie", ["raw_length", "offset"])
def test_restart_over_a_sidecar_that_lies(fresh: tuple[Gateway, Any, str], lie: str) -> None:
    """Before: with the object's raw length raised by 100 in its sidecar, GET answered
    Content-Length 5100 and sent 5000 bytes (boto3: IncompleteRead); with its offset at 1 TiB,
    the gateway exited at start (OverflowError in the index). Now the sidecar is found bad, the
    segment's footer is used: the object comes back as written."""
    gw, raw, _ = fresh
    s3 = gateway_client(gw.endpoint)
    s3.create_bucket(Bucket="objs")
    data = bytes(range(250)) * 20
    s3.put_object(Bucket="objs", Key="k", Body=data)
    store_stats(gw.endpoint, flush=True)
    gw.stop()
    if lie == "raw_length":
        rewrite_sidecar(raw, fresh[2], lambda e: e._replace(raw_length=e.raw_length + 100))
    else:
        rewrite_sidecar(raw, fresh[2], lambda e: e._replace(offset=1 << 40))
    gw.start()
    got = s3.get_object(Bucket="objs", Key="k")
    assert got["ContentLength"] == len(data)
    assert got["Body"].read() == data
    assert "manifest.sidecar_bad" in gw.log_text()


@pytest.mark.parametrize("stamp", [1e12, float("nan"), -1e12])
def test_restart_over_a_sidecar_with_stamps_no_date_holds(fresh: tuple[Gateway, Any, str],
                                                          stamp: float) -> None:
    """Before: an entry stamped in the year 33658 (or NaN, or before year 1) was indexed with
    that stamp: GET, HEAD and ListObjectsV2 answered 500 InternalError (no HTTP date or ISO
    8601 form holds it), and last writer wins compared NaN. Now the sidecar is bad, the
    footer's stamps stand."""
    gw, raw, bucket = fresh
    s3 = gateway_client(gw.endpoint)
    s3.create_bucket(Bucket="objs")
    s3.put_object(Bucket="objs", Key="k", Body=b"hello")
    store_stats(gw.endpoint, flush=True)
    gw.stop()
    rewrite_sidecar(raw, bucket, lambda e: e._replace(written_at=stamp))
    gw.start()
    assert s3.get_object(Bucket="objs", Key="k")["Body"].read() == b"hello"
    assert s3.head_object(Bucket="objs", Key="k")["ContentLength"] == 5
    listed = s3.list_objects_v2(Bucket="objs")["Contents"]
    assert [o["Key"] for o in listed] == ["k"]
    assert 2020 < listed[0]["LastModified"].year < 2100
