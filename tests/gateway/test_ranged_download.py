"""A parallel ranged download (boto3's transfer manager, as ``aws s3 cp`` and awscrt do for a
large object) reads the block from the backend once, not once per range: the block's checksum
covers all of it, so each range used to cost a read and a verification of the whole block."""

from __future__ import annotations

import io
import os

import pytest
from boto3.s3.transfer import TransferConfig

from tests.gateway.conftest import Gateway, gateway_client, store_stats

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def gateway(multipart_gateway: Gateway) -> Gateway:
    """Blocks up to 16 MiB, no DRAM tier: every read of a sealed block goes to the backend."""
    return multipart_gateway


def test_parallel_ranges_of_a_block_share_one_backend_read(gateway: Gateway, gw_bucket: str
                                                           ) -> None:
    s3 = gateway_client(gateway.endpoint)
    body = os.urandom(12 * MiB)
    s3.put_object(Bucket=gw_bucket, Key="big", Body=body)
    before = store_stats(gateway.endpoint, flush=True)  # sealed: reads go to the backend
    out = io.BytesIO()
    s3.download_fileobj(gw_bucket, "big", out, Config=TransferConfig(
        multipart_threshold=MiB, multipart_chunksize=2 * MiB, max_concurrency=6))
    assert out.getvalue() == body
    after = store_stats(gateway.endpoint)
    assert after["backend_reads"] - before["backend_reads"] == 1
    assert after["shared_range_reads"] - before["shared_range_reads"] >= 5  # six 2 MiB ranges
    # a block written again is another block: its ranges read it afresh
    body2 = os.urandom(12 * MiB)
    s3.put_object(Bucket=gw_bucket, Key="big", Body=body2)
    store_stats(gateway.endpoint, flush=True)
    got = s3.get_object(Bucket=gw_bucket, Key="big", Range="bytes=0-99")["Body"].read()
    assert got == body2[:100]
