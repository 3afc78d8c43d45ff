"""Small store settings for tests (moto needs parts >= 5 MiB, so segments of 10 MiB), and what
the tests read back from a store: its segment objects, and keys indexed past them."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from typing import Any

from s3kv.backends.base import Backend
from s3kv.config import Settings
from s3kv.sizes import MiB
from s3kv.store.segments import name_from_key
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


async def restart(store: BlockStore, backend: Backend, **over: Any) -> BlockStore:
    """Close ``store`` and open a new one on the same backend (as a gateway restart does)."""
    await store.close()
    return await open_store(backend, seal_after=30, **over)


def block(i: int, size: int) -> bytes:
    """Deterministic, distinct content per index."""
    head = f"block-{i:08d}|".encode()
    return (head + os.urandom(max(0, size - len(head))))[:size]


async def put_chain(store: BlockStore, n: int, size: int, prefix: str = "c", *,
                    flush: bool = True) -> tuple[list[bytes], list[bytes]]:
    """Put a chain of ``n`` blocks of ``size`` bytes into namespace ``kvns`` (keys
    ``{prefix}000``...), on the backend once ``flush``ed; returns (keys, blocks)."""
    keys = [f"{prefix}{i:03d}".encode() for i in range(n)]
    blocks = [block(i, size) for i in range(n)]
    for key, data in zip(keys, blocks, strict=True):
        await store.put("kvns", key, data)
    if flush:
        await store.flush()
    return keys, blocks


async def segments_on_backend(backend: Backend) -> dict[str, int]:
    """The segment objects on the backend (store prefix ""): name -> size."""
    out = {}
    for obj in await backend.list_objects("segments/"):
        name = name_from_key(obj.key, "", "segments")
        assert name is not None
        out[name] = obj.size
    return out


def dangling(store: BlockStore, namespace: str, keys: Iterable[bytes],
             on_backend: Collection[str]) -> list[bytes]:
    """The keys still indexed whose segment is unknown or not among ``on_backend`` (names):
    after eviction this must be empty."""
    nid = store.ns_id(namespace)
    out = []
    for key in keys:
        loc = store.index.get(nid, key)
        if loc is not None:
            info = store.segments.get(loc.segment)
            if info is None or info.name not in on_backend:
                out.append(key)
    return out


async def mostly_dead_segment(store: BlockStore, namespace: str = "kvns") -> bytes:
    """A sealed segment of eight 512 KiB blocks c0..c7 with c0 read since (hot) and c1..c6
    deleted (live ratio 2/8, below a compact_threshold of 0.5): c0's bytes."""
    await store.create_namespace(namespace)
    for i in range(8):
        await store.put(namespace, f"c{i}".encode(), block(i, 512 * 1024))
    await store.flush()
    hot = await store.get(namespace, b"c0")
    assert hot is not None
    for i in range(1, 7):
        await store.delete(namespace, f"c{i}".encode())
    return bytes(hot)


async def tombstone_in_a_dead_segment(store: BlockStore, namespace: str = "kvns") -> None:
    """Two sealed segments: A with blocks k1 and k2, then B with k3 and the tombstones of k1
    and k3. Nothing in B is live (it goes as dead); its k1 tombstone hides A's k1."""
    await store.create_namespace(namespace)
    await store.put(namespace, b"k1", block(1, 64 * 1024))
    await store.put(namespace, b"k2", block(2, 64 * 1024))
    await store.flush()
    await store.put(namespace, b"k3", block(3, 64 * 1024))
    await store.delete(namespace, b"k1")
    await store.delete(namespace, b"k3")
    await store.flush()
