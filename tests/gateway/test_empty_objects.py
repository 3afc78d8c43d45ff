"""Empty objects and directory markers (``dir/``, as the AWS console, s3fs and rclone make them)
through the S3 front, once their segment is sealed on the backend, after the eviction loop has
run and after a restart: HEAD, GET, ListObjectsV2 and CopyObject answer as for any object.

A soak of S3 clients on the gateway found two ways they were lost: a sealed empty block was
read from the backend as a zero-length range, which came back a miss (GET 404, copies of it
404), and eviction judged segments by their bytes, so a segment whose live blocks were all
empty was deleted as dead (HEAD 404 and gone from listings; tests/store/test_empty_blocks.py).
A real gateway process on moto over HTTP, boto3 as the client."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from s3kv.client import S3KVClient
from tests.gateway.conftest import (
    SMALL,
    TOKEN,
    Gateway,
    backend_store,
    gateway_client,
    running_gateway,
    store_stats,
)
from tests.support.s3server import MotoServer

EMPTY_MD5 = hashlib.md5(b"").hexdigest()


@pytest.fixture
def restartable(s3_server: MotoServer) -> Iterator[Gateway]:
    with running_gateway(backend_store(s3_server), SMALL) as gw:
        yield gw


def _listed(s3: Any, bucket: str) -> dict[str, tuple[int, str]]:
    out = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: (o["Size"], o["ETag"].strip('"')) for o in out}


def _check(s3: Any, bucket: str, keys: list[str]) -> None:
    assert _listed(s3, bucket) == {k: (0, EMPTY_MD5) for k in keys}
    for key in keys:
        head = s3.head_object(Bucket=bucket, Key=key)
        assert (head["ContentLength"], head["ETag"].strip('"')) == (0, EMPTY_MD5)
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b""


def test_empty_objects_live_through_seal_eviction_and_restart(restartable: Gateway) -> None:
    gw, bucket = restartable, "empties"
    s3 = gateway_client(gw.endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="dir/", Body=b"")
    s3.put_object(Bucket=bucket, Key="dir/sub/", Body=b"")
    s3.put_object(Bucket=bucket, Key="big", Body=b"x" * 100_000)
    store_stats(gw.endpoint, flush=True)  # sealed and on the backend
    s3.delete_object(Bucket=bucket, Key="big")  # its segment's live blocks: the two empty ones
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "dir/"})
    store_stats(gw.endpoint, flush=True)
    time.sleep(2)  # eviction rounds (every 0.5 s) have judged both segments
    _check(s3, bucket, ["copy", "dir/", "dir/sub/"])
    assert gw.terminate() == 0
    gw.start()
    _check(s3, bucket, ["copy", "dir/", "dir/sub/"])


def test_an_empty_block_is_a_hit_through_the_native_api(restartable: Gateway) -> None:
    async def go() -> list[bytes | None]:
        async with S3KVClient(restartable.endpoint, token=TOKEN) as kv:
            await kv.create_namespace("native")
            await kv.put_many("native", {"e": b"", "f": b"abc"})
            await kv.flush()  # sealed: read from the backend's segment
            return await kv.get_many("native", ["e", "f", "absent"])
    assert asyncio.run(go()) == [b"", b"abc", None]
