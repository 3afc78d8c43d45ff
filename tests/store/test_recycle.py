"""The file backend writes large new objects over the files of deleted ones (recycle.py):
every object still reads back exactly as written, a view handed out keeps the bytes it had,
the pool stays within its limit and is never listed."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
from pathlib import Path

import pytest

from s3kv.backends import FileBackend, filemaps, fileuploads, filewindows
from s3kv.backends.multipart import MultipartUpload
from s3kv.errors import BackendError
from s3kv.retry import RetryPolicy
from s3kv.sizes import KiB

PART = 64 * KiB


async def small_pool(root: Path, limit: int = 1024 * KiB) -> FileBackend:
    backend = await FileBackend(root, recycle_bytes=limit).open()
    backend.recycled.min_bytes = 32 * KiB  # the tests' objects count as large
    return backend


async def multipart(backend: FileBackend, key: str, data: bytes) -> None:
    up = MultipartUpload(backend, key, PART, RetryPolicy(), asyncio.Semaphore(2))
    await up.start()
    for at in range(0, len(data), PART):
        await up.add_part(data[at:at + PART])
    await up.complete()


def inode(backend: FileBackend, key: str) -> int:
    return (backend.root / key).stat().st_ino


async def test_a_deleted_file_is_written_over_and_reads_back_exactly(tmp_path: Path) -> None:
    backend = await small_pool(tmp_path)
    old = os.urandom(5 * PART)
    await multipart(backend, "seg/a", old)
    first = inode(backend, "seg/a")
    await backend.delete_objects(["seg/a"])
    assert backend.recycled.bytes == len(old)
    # shorter than the file it reuses: nothing of the old object's tail survives
    new = os.urandom(2 * PART + 100)
    await multipart(backend, "seg/b", new)
    assert inode(backend, "seg/b") == first and backend.recycled.reused == 1
    assert backend.recycled.bytes == 0
    assert await backend.get_object("seg/b") == new
    assert await backend.head_object("seg/b") == len(new)
    # longer, through one PUT
    await backend.delete_objects(["seg/b"])
    longer = os.urandom(7 * PART)
    await backend.put_object("seg/c", longer)
    assert inode(backend, "seg/c") == first
    assert await backend.get_object("seg/c") == longer
    assert [o.key for o in await backend.list_objects("")] == ["seg/c"]


async def test_a_view_handed_out_keeps_its_bytes(tmp_path: Path) -> None:
    backend = await small_pool(tmp_path)
    old = os.urandom(4 * PART)
    await backend.put_object("seg/a", old)
    view = await backend.view_range("seg/a", PART, PART)
    await backend.delete_objects(["seg/a"])
    assert backend.recycled.bytes == 0  # in use: deleted, not kept
    await backend.put_object("seg/b", os.urandom(4 * PART))
    assert backend.recycled.reused == 0
    assert bytes(view) == old[PART:2 * PART]
    view.release()
    # without a view alive, the next delete keeps the file, mapped or not
    await backend.view_range("seg/b", 0, PART)  # mapped (cached), view dropped at once
    for _ in range(3):  # the worker thread's future lets go of its result
        await asyncio.sleep(0)
    gc.collect()  # and any cycle that still holds it
    await backend.delete_objects(["seg/b"])
    assert backend.recycled.bytes == 4 * PART


async def windowed(backend: FileBackend, key: str, data: bytes) -> memoryview:
    """An upload of ``data`` received through a window (as landed blocks are); the window."""
    upload = await backend.create_multipart(key, PART)
    window = await backend.upload_window(key, upload, 0, len(data))
    assert window is not None
    window[:] = data
    etags = [await backend.upload_part(key, upload, n + 1, [window[at:at + PART]])
             for n, at in enumerate(range(0, len(data), PART))]
    await backend.complete_multipart(key, upload, list(enumerate(etags, 1)))
    return window


async def test_a_view_of_a_window_keeps_its_bytes(tmp_path: Path) -> None:
    # an open segment's reads of landed blocks are views of the window they landed in
    backend = await small_pool(tmp_path)
    old = os.urandom(4 * PART)
    window = await windowed(backend, "seg/a", old)
    view = window[PART:2 * PART]
    window.release()
    await backend.delete_objects(["seg/a"])
    assert backend.recycled.bytes == 0  # in use: deleted, not kept
    await multipart(backend, "seg/b", os.urandom(4 * PART))
    assert backend.recycled.reused == 0
    assert bytes(view) == old[PART:2 * PART]
    view.release()
    # no view of its windows left: the next one's file is kept
    (await windowed(backend, "seg/c", os.urandom(4 * PART))).release()
    gc.collect()
    await backend.delete_objects(["seg/c"])
    assert backend.recycled.bytes == 4 * PART


async def test_the_pool_keeps_within_its_limit_and_leaves_small_files(tmp_path: Path) -> None:
    backend = await small_pool(tmp_path, limit=5 * PART)
    for name in "abc":
        await backend.put_object(f"seg/{name}", os.urandom(2 * PART))
    await backend.put_object("small", b"x" * 100)
    await backend.delete_objects(["seg/a", "seg/b", "seg/c", "small"])
    assert backend.recycled.bytes == 4 * PART  # the third would go over the limit
    assert await backend.list_objects("") == []
    assert len(list((tmp_path / ".recycled").iterdir())) == 2
    check = await backend.check()
    assert check is None


async def test_files_left_by_an_earlier_process_are_reused(tmp_path: Path) -> None:
    backend = await small_pool(tmp_path)
    await backend.put_object("seg/a", os.urandom(3 * PART))
    await backend.delete_objects(["seg/a"])
    await backend.close()
    again = await small_pool(tmp_path, limit=3 * PART)
    assert again.recycled.bytes == 3 * PART
    data = os.urandom(PART)
    await multipart(again, "seg/b", data)
    assert again.recycled.reused == 1
    assert await again.get_object("seg/b") == data
    # a pool over a smaller limit than the files it finds deletes the rest
    await again.delete_objects(["seg/b"])
    third = await small_pool(tmp_path, limit=0)
    assert third.recycled.bytes == 0 and not list((tmp_path / ".recycled").iterdir())


async def test_no_recycling_when_disabled(tmp_path: Path) -> None:
    backend = await small_pool(tmp_path, limit=0)
    await backend.put_object("seg/a", os.urandom(3 * PART))
    await backend.delete_objects(["seg/a"])
    assert backend.recycled.bytes == 0
    assert not list((tmp_path / ".recycled").iterdir())


async def test_a_recycled_file_comes_with_its_mapping(tmp_path: Path) -> None:
    """Windows onto a recycled file are lent from the mapping its last object's windows came
    from (its page tables kept): no new mapping, no page populated again."""
    backend = await small_pool(tmp_path)
    (await windowed(backend, "seg/a", os.urandom(4 * PART))).release()
    gc.collect()
    await backend.delete_objects(["seg/a"])
    assert backend.recycled.bytes == 4 * PART
    new = os.urandom(3 * PART)
    (await windowed(backend, "seg/b", new)).release()
    assert backend.recycled.reused == 1 and backend.recycled.maps_reused == 1
    assert await backend.get_object("seg/b") == new


async def test_a_recycled_mapping_lends_past_a_shorter_object(tmp_path: Path) -> None:
    """A short object truncates the file under its mapping; the next, longer one is lent
    pages allocated afresh past that length, and reads back exactly."""
    backend = await small_pool(tmp_path)
    for key, size in (("seg/a", 4 * PART), ("seg/b", PART), ("seg/c", 5 * PART)):
        data = os.urandom(size)
        (await windowed(backend, key, data)).release()
        assert await backend.get_object(key) == data
        gc.collect()
        await backend.delete_objects([key])
    assert backend.recycled.maps_reused == 2


async def test_only_the_last_files_keep_their_mappings(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filemaps, "MAX_KEPT", 1)
    backend = await small_pool(tmp_path)
    for key in ("seg/a", "seg/b"):
        (await windowed(backend, key, os.urandom(4 * PART))).release()
    gc.collect()
    await backend.delete_objects(["seg/a"])  # its mapping was let go when seg/b's was kept
    (await windowed(backend, "seg/c", os.urandom(4 * PART))).release()
    assert backend.recycled.reused == 1 and backend.recycled.maps_reused == 0


async def test_a_recycled_file_that_cannot_be_opened_lets_its_mapping_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mapping kept with a pooled file goes to whoever takes the file: an upload that
    takes it and then fails to open it (disk full, I/O error) unmaps it at once (it was left
    in the pool, mapping a file that no longer existed, until the backend closed)."""
    backend = await small_pool(tmp_path)
    (await windowed(backend, "seg/a", os.urandom(4 * PART))).release()
    gc.collect()
    await backend.delete_objects(["seg/a"])
    closed: list[filewindows.FileMap] = []
    close = filewindows.FileMap.close

    def recording_close(self: filewindows.FileMap) -> bool:
        closed.append(self)
        return close(self)

    def failing_open(path: object, flags: int, mode: int = 0o777) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(filewindows.FileMap, "close", recording_close)
    with monkeypatch.context() as m:
        m.setattr(fileuploads.os, "open", failing_open)
        with pytest.raises(BackendError):
            await backend.create_multipart("seg/b", PART)
    assert len(closed) == 1 and closed[0].mapping.closed
    assert backend.recycled.bytes == 0
    await backend.close()
    assert len(closed) == 1  # nothing was left for the backend's close


def test_a_mapping_is_ready_only_where_it_maps_populated_pages(tmp_path: Path) -> None:
    """``FileMap.ready`` (a window lent on the event loop, fileuploads.window_now): only over
    pages populated and inside the mapping, whose length need not be whole pages."""
    length = 3 * 4096 + 100
    fd = os.open(tmp_path / "data", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, length)
    fm = filewindows.FileMap(fd, length)
    try:
        assert not fm.ready(0, 4096)
        window = fm.window(4096, 4096)
        assert fm.ready(4096, 4096) and fm.ready(5000, 10)
        assert not fm.ready(0, 8192) and not fm.ready(4096, 4097)
        del window
        fm.window(0, length)
        assert fm.ready(0, length)
        assert not fm.ready(length - 10, 20)  # past the mapping, though inside its last page
        fm.truncated(4096)  # the pages past a truncation are unmapped by the kernel
        assert fm.ready(0, 4096) and not fm.ready(0, 4097)
    finally:
        gc.collect()
        fm.close()
        os.close(fd)
