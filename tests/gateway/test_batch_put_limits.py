"""The batch-put body limit leaves room for the framing: a batch of 64 blocks of the max block
size, with long keys, is taken whole (it was refused EntityTooLarge, the limit being exactly 64
blocks' bytes with nothing for the head)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from s3kv.client import S3KVClient
from tests.gateway.conftest import TOKEN, running_gateway

KiB = 1024


def test_a_batch_of_64_max_size_blocks_with_long_keys_is_stored(tmp_path: Path) -> None:
    blocks = [(f"{'k' * 900}/{i:03d}", os.urandom(64 * KiB)) for i in range(64)]
    args = ["--max-block-size", "64KiB", "--max-request-memory", "256MiB",
            "--segment-size", "16MiB", "--sync-interval", "0"]
    with running_gateway(f"file://{tmp_path}/store", args) as gw:

        async def run() -> tuple[int, list[bytes | None]]:
            async with S3KVClient(gw.endpoint, token=TOKEN, timeout=60) as kv:
                await kv.create_namespace("limits")
                stored = await kv.put_many("limits", blocks)
                return stored, await kv.get_many("limits", [k for k, _ in blocks])

        stored, got = asyncio.run(run())
    assert stored == len(blocks)
    assert got == [b for _, b in blocks]
