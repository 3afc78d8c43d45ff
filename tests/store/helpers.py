"""Small store settings for tests: moto needs parts >= 5 MiB, so segments of 10 MiB."""

from __future__ import annotations

import os
from typing import Any

from s3kv.backends.base import Backend
from s3kv.config import Settings
from s3kv.sizes import MiB
from s3kv.store.store import BlockStore

SEG = 10 * MiB
PART = 5 * MiB


def small_settings(**over: Any) -> Settings:
    base: dict[str, Any] = {
        "segment_size": SEG, "part_size": PART, "max_block_size": 2 * MiB,
        "seal_after": 0.5, "sync_interval": 0, "backend_timeout": 5.0,
        "max_open_segments": 3,
    }
    base.update(over)
    return Settings.load(base, env={})


async def open_store(backend: Backend, **over: Any) -> BlockStore:
    return await BlockStore.open(small_settings(**over), backend=backend)


def block(i: int, size: int) -> bytes:
    """Deterministic, distinct content per index."""
    head = f"block-{i:08d}|".encode()
    return (head + os.urandom(max(0, size - len(head))))[:size]
