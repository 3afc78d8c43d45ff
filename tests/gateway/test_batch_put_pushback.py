"""A batch put the store pushes back half-way: the 503 says how many leading blocks it stored,
and a client that sends only the rest stores every block exactly once.

The push-back is real: the gateway holds one segment in memory (``--max-open-segments 1``) and
its backend link runs at 1 MiB/s through the fault proxy, so the batch's second segment cannot
open while the first one is still uploading.
"""

from __future__ import annotations

import asyncio
import os
import uuid

from s3kv.client import S3KVClient
from s3kv.errors import Backpressure
from tests.gateway.conftest import SMALL, TOKEN, Gateway, backend_store, gateway_client
from tests.support.faultproxy import FaultProxy
from tests.support.s3server import MotoServer

MiB = 1024 * 1024


def test_pushed_back_batch_put_reports_stored_prefix(s3_server: MotoServer) -> None:
    blocks = [(f"chain/{i:03d}", os.urandom(MiB - 4096 + i)) for i in range(24)]
    backend_bucket = f"push-{uuid.uuid4().hex[:10]}"
    backend_store(s3_server, backend_bucket)
    with FaultProxy(s3_server.host, s3_server.port) as proxy:
        gw = Gateway(f"s3://{backend_bucket}/kv?endpoint={proxy.endpoint}",
                     [*SMALL, "--max-open-segments", "1", "--seal-after", "30"])
        try:
            gw.start()
            gateway_client(gw.endpoint).create_bucket(Bucket="push")
            proxy.set(bandwidth=1 * MiB)

            async def run() -> tuple[list[int], dict[str, float], list[bytes | None]]:
                pushed: list[int] = []
                async with S3KVClient(gw.endpoint, token=TOKEN, timeout=120) as kv:
                    i = 0
                    while i < len(blocks):
                        try:
                            i += await kv.put_many("push", blocks[i:])
                        except Backpressure as exc:
                            pushed.append(exc.stored)
                            i += exc.stored
                            proxy.clear()  # the link recovers; the segment uploads
                            await asyncio.sleep(exc.retry_after)
                    await kv.flush()
                    return (pushed, await kv.stats(),
                            await kv.get_many("push", [k for k, _ in blocks]))

            pushed, stats, got = asyncio.run(run())
        finally:
            gw.cleanup()
    # a 10 MiB segment holds 9 of these blocks: the 10th needs the second segment
    assert pushed and 0 < pushed[0] < len(blocks), pushed
    assert stats["blocks_put"] == len(blocks)  # none stored twice
    assert got == [b for _, b in blocks]
