"""A crash leaves a state the client saw: an overwrite or a delete lost with the open segment
that held it (write-back) leaves the previous version, also when it had left nothing live in
the previous version's segment. Eviction deletes such a dead segment only once what killed
its blocks is on the backend; it once deleted it at once, so a gateway killed after
overwriting and deleting the blocks of a sealed segment came back with neither version
(NoSuchKey for both: a state no client ever saw)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from botocore.exceptions import ClientError

from tests.support.gateway import backend_store, gateway_client, running_gateway, store_stats
from tests.support.s3server import MotoServer


def _read(s3: Any, bucket: str, key: str) -> bytes | None:
    try:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body
    except ClientError as err:
        assert err.response["Error"]["Code"] == "NoSuchKey"
        return None


def test_a_lost_overwrite_of_a_whole_segment_leaves_the_previous_version(
        s3_server: MotoServer) -> None:
    with running_gateway(backend_store(s3_server), ["--seal-after", "30"]) as gw:
        s3, bucket = gateway_client(gw.endpoint), f"prefix-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="k", Body=b"v1")
        s3.put_object(Bucket=bucket, Key="d", Body=b"d1")
        store_stats(gw.endpoint, flush=True)  # segment A on the backend: k=v1, d=d1
        s3.put_object(Bucket=bucket, Key="k", Body=b"v2")  # write-back: A is dead now
        s3.delete_object(Bucket=bucket, Key="d")
        time.sleep(2)  # eviction rounds (every 0.5 s) come and go
        assert store_stats(gw.endpoint)["evictions"] == 0  # A waits for what killed it
        gw.kill()
        gw.start()
        assert (_read(s3, bucket, "k"), _read(s3, bucket, "d")) == (b"v1", b"d1")
        # once what killed A is on the backend, A goes, and a crash finds the newer state
        s3.put_object(Bucket=bucket, Key="k", Body=b"v3")
        s3.delete_object(Bucket=bucket, Key="d")
        store_stats(gw.endpoint, flush=True)
        deadline = time.monotonic() + 10
        while store_stats(gw.endpoint)["evictions"] < 1:
            assert time.monotonic() < deadline, "the dead segment was never evicted"
            time.sleep(0.2)
        gw.kill()
        gw.start()
        assert (_read(s3, bucket, "k"), _read(s3, bucket, "d")) == (b"v3", None)
