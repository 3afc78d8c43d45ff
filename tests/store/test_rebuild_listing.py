"""A store starting while a replica seals a segment keeps that segment's sidecar (recovery.py
lists the sidecars before the segments), so its syncs load the segment."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from s3kv.backends import FileBackend
from s3kv.backends.base import ObjectInfo
from tests.store.helpers import open_store


class SealsWhileListed(FileBackend):
    """Runs ``hook`` (once) right after a listing of the segments."""

    hook: Callable[[], Awaitable[None]] | None = None

    async def list_objects(self, prefix: str) -> list[ObjectInfo]:
        out = await super().list_objects(prefix)
        if prefix.endswith("segments/") and self.hook is not None:
            hook, self.hook = self.hook, None
            await hook()
        return out


async def test_a_segment_sealed_during_a_start_is_synced(tmp_path: Path) -> None:
    plain = await FileBackend(tmp_path / "store").open()
    hooked = await SealsWhileListed(tmp_path / "store").open()
    b = await open_store(plain, node_id="node-b", seal_after=30)
    a = None
    try:
        await b.create_namespace("kvns")
        await b.put("kvns", b"k", b"from-b")
        hooked.hook = b.flush  # b's segment and sidecar land between a's two listings
        a = await open_store(hooked, node_id="node-a", seal_after=30)
        assert hooked.hook is None
        assert [o.key for o in await plain.list_objects("manifests/")]  # kept
        await a.recovery_sync()
        assert await a.get("kvns", b"k") == b"from-b"
    finally:
        await asyncio.gather(b.close(), *([a.close()] if a else []))
        await asyncio.gather(plain.close(), hooked.close())
