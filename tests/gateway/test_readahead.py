"""One GET per object, in the order the objects were written (a prefix restored by an S3 client
that stores one object per block), is served from a few large ranged reads of the segment
instead of one backend read per object (s3kv/store/readahead.py); the same GETs in a scattered
order read each block alone; a block written again after its segment was read ahead is read
afresh. Real gateway process, moto behind it, boto3 in front."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.gateway.conftest import Gateway, gateway_client, store_stats

KiB = 1024
N = 24
SIZE = 512 * KiB


@pytest.fixture(scope="module")
def gateway(multipart_gateway: Gateway) -> Gateway:
    """No DRAM tier: every read of a sealed block goes to the backend or a read-ahead window."""
    return multipart_gateway


def _write(s3: Any, bucket: str, endpoint: str) -> list[bytes]:
    store_stats(endpoint, flush=True)  # the blocks go into a segment of their own
    bodies = [os.urandom(SIZE) for _ in range(N)]
    for i, body in enumerate(bodies):
        s3.put_object(Bucket=bucket, Key=f"chunk/{i:03d}", Body=body)
    store_stats(endpoint, flush=True)  # sealed: reads go to the backend
    return bodies


def _delta(after: dict[str, Any], before: dict[str, Any], key: str) -> float:
    return float(after[key] - before[key])


def test_gets_in_write_order_read_the_segment_in_large_ranges(gateway: Gateway,
                                                              gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    bodies = _write(s3, gw_bucket, gateway.endpoint)
    before = store_stats(gateway.endpoint)
    for i, body in enumerate(bodies):
        assert s3.get_object(Bucket=gw_bucket, Key=f"chunk/{i:03d}")["Body"].read() == body
    after = store_stats(gateway.endpoint)
    # two GETs make the walk; one window of 32 MiB holds the other 22 blocks
    assert _delta(after, before, "readahead_blocks") == N - 2
    assert _delta(after, before, "backend_reads") <= 4
    assert _delta(after, before, "checksum_failures") == 0

    # a block written again is in another segment: read afresh, not from the window
    new = os.urandom(SIZE)
    s3.put_object(Bucket=gw_bucket, Key="chunk/010", Body=new)
    store_stats(gateway.endpoint, flush=True)
    assert s3.get_object(Bucket=gw_bucket, Key="chunk/010")["Body"].read() == new
    assert s3.get_object(Bucket=gw_bucket, Key="chunk/011")["Body"].read() == bodies[11]


def test_scattered_gets_read_each_block_alone(gateway: Gateway, gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    bodies = _write(s3, gw_bucket, gateway.endpoint)
    before = store_stats(gateway.endpoint)
    for i in (i * 5 % N for i in range(N)):  # never two neighbours in a row
        assert s3.get_object(Bucket=gw_bucket, Key=f"chunk/{i:03d}")["Body"].read() == bodies[i]
    after = store_stats(gateway.endpoint)
    assert _delta(after, before, "readahead_windows") == 0
    assert _delta(after, before, "backend_reads") == N
