"""Two real gateways (``s3kv serve`` processes) on one moto bucket: what a delete through one
replica leaves on the backend for the other, and for restarts (docs/operations.md, "Several
gateways"), and what a gateway killed between a segment's upload and its sidecar's leaves.
With ``ARGS`` neither replica syncs on its timer (``--sync-interval 3600``): what the other
replica learns, it learns at its start, from the manifests on the backend."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from tests.conftest import make_s3_client
from tests.support.gateway import (
    ROOT,
    Gateway,
    backend_store,
    gateway_client,
    running_gateways,
    store_stats,
)
from tests.support.s3server import MotoServer

ARGS = ["--segment-size", "10MiB", "--part-size", "5MiB", "--max-block-size", "5MiB",
        "--seal-after", "0.5", "--sync-interval", "3600"]


@pytest.fixture
def pair(s3_server: MotoServer) -> Iterator[list[Gateway]]:
    with running_gateways(backend_store(s3_server), [ARGS, ARGS], log_level="info") as gws:
        yield gws


def _status(client: object, bucket: str, key: str) -> int:
    try:
        client.head_object(Bucket=bucket, Key=key)  # type: ignore[attr-defined]
    except ClientError as err:
        return int(err.response["ResponseMetadata"]["HTTPStatusCode"])
    return 200


def test_a_delete_through_a_replica_that_never_saw_the_block_survives_restarts(
        pair: list[Gateway]) -> None:
    """PUT through A (sealed), DELETE through B before B synced it (B answers 204 but held no
    such block), then restart B and A: the object stays deleted (404 on both). Before, B wrote
    no tombstone, so B's restart read A's manifest and served the object again (200), and A,
    restarted, served it too."""
    a, b = pair
    ca = gateway_client(a.endpoint)
    ca.create_bucket(Bucket="tomb")
    b.terminate()
    b.start()  # B knows the bucket (its start reads the records), not what A writes next
    cb = gateway_client(b.endpoint)
    ca.put_object(Bucket="tomb", Key="k", Body=b"v1")
    store_stats(a.endpoint, flush=True)  # A's segment is on the backend
    assert _status(cb, "tomb", "k") == 404  # B has not synced it
    cb.delete_object(Bucket="tomb", Key="k")
    store_stats(b.endpoint, flush=True)
    for gw in (b, a):
        gw.terminate()
        gw.start()
    assert _status(gateway_client(b.endpoint), "tomb", "k") == 404
    assert _status(gateway_client(a.endpoint), "tomb", "k") == 404


def test_a_segment_left_without_its_sidecar_by_a_killed_gateway_reaches_the_other(
        s3_server: MotoServer) -> None:
    """A seals a segment, then is killed (kill -9) before its sidecar is written (the sidecar
    removed from the bucket stands for that moment); B, running, serves A's object once its
    sync has listed the segment without a sidecar for backend_timeout + sync_interval (2 s
    here). Before, B's syncs ignored a segment without a sidecar: 404 until B restarted."""
    fast = [*ARGS[:-1], "0.5", "--backend-timeout", "1.5"]
    store = backend_store(s3_server)
    bucket = store.removeprefix("s3://").split("/")[0]
    with running_gateways(store, [ARGS, fast], log_level="info") as (a, b):
        ca = gateway_client(a.endpoint)
        ca.create_bucket(Bucket="bare")
        cb = gateway_client(b.endpoint)
        deadline = time.monotonic() + 10
        while "bare" not in [x["Name"] for x in cb.list_buckets()["Buckets"]]:
            assert time.monotonic() < deadline, "B never learnt the bucket"
            time.sleep(0.1)
        raw = make_s3_client(s3_server.endpoint)
        before = {o["Key"] for o in raw.list_objects_v2(Bucket=bucket).get("Contents", [])}
        ca.put_object(Bucket="bare", Key="k", Body=b"v1")
        store_stats(a.endpoint, flush=True)
        after = {o["Key"] for o in raw.list_objects_v2(Bucket=bucket).get("Contents", [])}
        (sidecar,) = [k for k in after - before if k.endswith(".mf")]
        raw.delete_object(Bucket=bucket, Key=sidecar)
        a.kill()
        deadline = time.monotonic() + 15
        while _status(cb, "bare", "k") != 200:
            assert time.monotonic() < deadline, "B never served the segment without a sidecar"
            time.sleep(0.2)
        assert cb.get_object(Bucket="bare", Key="k")["Body"].read() == b"v1"


def test_a_delete_through_a_gateway_whose_clock_is_behind_deletes(
        s3_server: MotoServer) -> None:
    """B's clock is 10 s behind A's (``tests/support/skewed.py``). An object written through A
    and known to B (B started after it was sealed) is deleted through B: 404 on B at once, and
    on both after a restart. Before, B's tombstone was stamped before A's write: the DELETE
    answered 204 and the object stayed, on B and everywhere."""
    store = backend_store(s3_server)
    a = Gateway(store, ARGS, log_level="info")
    b = Gateway(store, ARGS, log_level="info",
                prefix=(sys.executable, str(ROOT / "tests" / "support" / "skewed.py"), "10"))
    try:
        a.start()
        ca = gateway_client(a.endpoint)
        ca.create_bucket(Bucket="skew")
        ca.put_object(Bucket="skew", Key="k", Body=b"v1")
        store_stats(a.endpoint, flush=True)
        b.start()  # B replays A's manifest: it sees A's write, and its stamp
        cb = gateway_client(b.endpoint)
        assert cb.get_object(Bucket="skew", Key="k")["Body"].read() == b"v1"
        cb.delete_object(Bucket="skew", Key="k")
        assert _status(cb, "skew", "k") == 404
        store_stats(b.endpoint, flush=True)
        for gw in (a, b):
            gw.terminate()
            gw.start()
        assert _status(gateway_client(a.endpoint), "skew", "k") == 404
        assert _status(gateway_client(b.endpoint), "skew", "k") == 404
    finally:
        a.cleanup()
        b.cleanup()
