"""Part uploads give way to reads (s3kv/store/pacing.py): up to max_parts_in_flight run when
no read waits on the backend, parts_in_flight_reading while one does, and a held-back upload
starts once the reads are over even if no other upload ends."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from s3kv.backends import FileBackend
from s3kv.config import Settings
from s3kv.errors import ConfigError
from s3kv.sizes import KiB, MiB
from s3kv.store.pacing import UploadSlots
from tests.store.helpers import block, open_store


async def test_the_limit_follows_the_reads() -> None:
    reading = False
    slots = UploadSlots(4, 1, lambda: reading, recheck=0.01)
    for _ in range(4):
        await slots.acquire()  # no reads: four at once
    fifth = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0.03)
    assert not fifth.done()
    slots.release()
    await asyncio.wait_for(fifth, 1)
    for _ in range(4):
        slots.release()
    reading = True
    async with slots:  # while reads wait: one at a time
        second = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0.05)
        assert not second.done() and slots.held_back == 1
    await asyncio.wait_for(second, 1)
    third = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0.05)
    assert not third.done()
    reading = False  # the reads end; nobody releases: the recheck lets it start
    await asyncio.wait_for(third, 1)
    assert slots.in_flight == 2


def test_settings_keep_the_pacing_within_the_maximum() -> None:
    with pytest.raises(ConfigError, match="parts_in_flight_reading"):
        Settings(max_parts_in_flight=2, parts_in_flight_reading=3).validate()
    Settings(max_parts_in_flight=2, parts_in_flight_reading=2).validate()
    with pytest.raises(ValueError):
        UploadSlots(2, 0, lambda: False)


class _Watched:
    """A backend whose part uploads take a while (counted: most at once) and whose ranged
    reads wait for ``release`` (a read in flight, as long as the test wants)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.now = self.most = 0
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def upload_part(self, *args: Any) -> str:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.02)
            return str(await self._backend.upload_part(*args))
        finally:
            self.now -= 1

    async def view_range(self, *args: Any) -> memoryview:
        await self.release.wait()
        return await self._backend.view_range(*args)  # type: ignore[no-any-return]


async def test_a_store_uploads_one_part_at_a_time_while_a_read_waits(tmp_path: Path) -> None:
    watched = _Watched(await FileBackend(tmp_path / "store").open())
    store = await open_store(watched, segment_size=16 * MiB, part_size=MiB,
                             max_parts_in_flight=4, parts_in_flight_reading=1, seal_after=30)
    try:
        await store.create_namespace("kvns")
        await store.put("kvns", b"old", block(0, 256 * KiB))
        await store.flush()
        reader = asyncio.create_task(store.get_many("kvns", [b"old"]))
        await asyncio.sleep(0.05)  # the read now waits on the backend
        for i in range(24):
            await store.put("kvns", b"w%d" % i, block(i, 256 * KiB))
        await asyncio.sleep(0.2)
        assert watched.most == 1 and store.writer.uploads_paced > 0
        watched.release.set()
        assert (await reader)[0] is not None
        for i in range(24, 64):  # no read waits: parts go out several at once again
            await store.put("kvns", b"w%d" % i, block(i, 256 * KiB))
        await store.flush()
        assert watched.most > 1
    finally:
        watched.release.set()
        await store.close()
