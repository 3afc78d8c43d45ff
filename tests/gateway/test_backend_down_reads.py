"""An object the gateway holds but cannot read from its backend now is 503 ServiceUnavailable
with Retry-After through the S3 front, not 404 NoSuchKey: S3 clients retry a 503 and take a 404
as "the object does not exist" (while HEAD answered 200 for it). A GET (through the plain lane
and, ranged, through the S3 handlers) and a CopyObject of it answer 503 while the backend fails,
and the bytes once it is back; an object that is gone is still 404. The native API keeps its
misses (an engine recomputes a missed prefix sooner than it waits out an outage:
tests/gateway/test_rgw_restart_reads.py). Found by a soak of S3 clients on the gateway over Ceph
RGW stopped and paused. A real gateway process over a fault proxy in front of moto, boto3."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.gateway.conftest import SMALL, Gateway, gateway_client, running_gateway, store_stats
from tests.support.faultproxy import FaultProxy
from tests.support.gateway import backend_store, metric
from tests.support.s3server import MotoServer

BODY = bytes(range(256)) * 400  # 100 KiB


@pytest.fixture
def behind_proxy(s3_server: MotoServer) -> Iterator[tuple[Gateway, FaultProxy]]:
    store = backend_store(s3_server)  # the bucket on moto; the gateway reaches it through the proxy
    with FaultProxy("127.0.0.1", int(s3_server.endpoint.rsplit(":", 1)[1])) as proxy:
        store = store.replace(s3_server.endpoint, proxy.endpoint)
        # --etag fast: plain GETs are then answered by the plain lane (plainops.py)
        with running_gateway(store, [*SMALL, "--backend-timeout", "2", "--read-stall", "1",
                                     "--etag", "fast"]) as gw:
            yield gw, proxy


def _status(call: Any, **kw: Any) -> tuple[int, str, str | None]:
    try:
        call(**kw)
    except ClientError as exc:
        meta = exc.response["ResponseMetadata"]
        return (meta["HTTPStatusCode"], exc.response["Error"]["Code"],
                meta["HTTPHeaders"].get("retry-after"))
    return 200, "", None


def test_an_object_the_backend_cannot_serve_now_is_503_then_read(
        behind_proxy: tuple[Gateway, FaultProxy]) -> None:
    gw, proxy = behind_proxy
    s3 = gateway_client(gw.endpoint)
    s3.create_bucket(Bucket="outage")
    s3.put_object(Bucket="outage", Key="obj", Body=BODY)
    s3.put_object(Bucket="outage", Key="gone", Body=b"x")
    s3.delete_object(Bucket="outage", Key="gone")
    store_stats(gw.endpoint, flush=True)  # sealed: read from moto from now on
    proxy.set(p_500=1.0)  # every backend request fails
    try:
        assert s3.head_object(Bucket="outage", Key="obj")["ContentLength"] == len(BODY)
        unavailable = (503, "ServiceUnavailable", "1")
        assert _status(s3.get_object, Bucket="outage", Key="obj") == unavailable
        # a fresh connection's first request, a plain GET (no checksum mode), is the lane's
        fresh = gateway_client(gw.endpoint, response_checksum_validation="when_required")
        lane = metric(gw.endpoint, "s3kv_plain_lane_requests_total")
        assert _status(fresh.get_object, Bucket="outage", Key="obj") == unavailable
        assert metric(gw.endpoint, "s3kv_plain_lane_requests_total") > lane
        assert _status(s3.get_object, Bucket="outage", Key="obj",
                       Range="bytes=10-99") == unavailable
        assert _status(s3.copy_object, Bucket="outage", Key="copy",
                       CopySource={"Bucket": "outage", "Key": "obj"}) == unavailable
        assert _status(s3.get_object, Bucket="outage", Key="gone")[:2] == (404, "NoSuchKey")
        assert _status(s3.head_object, Bucket="outage", Key="copy")[0] == 404  # not made
    finally:
        proxy.clear()
    assert s3.get_object(Bucket="outage", Key="obj")["Body"].read() == BODY
    assert s3.get_object(Bucket="outage", Key="obj", Range="bytes=10-99")["Body"].read() \
        == BODY[10:100]
    s3.copy_object(Bucket="outage", Key="copy", CopySource={"Bucket": "outage", "Key": "obj"})
    assert s3.get_object(Bucket="outage", Key="copy")["Body"].read() == BODY
