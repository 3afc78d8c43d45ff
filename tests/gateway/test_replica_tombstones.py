"""Two real gateways (``s3kv serve`` processes) on one moto bucket: what a delete through one
replica leaves on the backend for the other, and for restarts (docs/operations.md, "Several
gateways"). Neither replica syncs on its timer here (``--sync-interval 3600``): what the other
replica learns, it learns at its start, from the manifests on the backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import (
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
