"""The file backend's multipart uploads (s3kv/backends/fileuploads.py): a part is one write into
the upload's data file, with no file opened or record written; the data file's descriptor is
closed when the upload ends, never under a part being written; an upload another process began
is an orphan, listed and aborted, never continued."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path

import pytest

import s3kv.backends.fileuploads as fileuploads
import s3kv.backends.filewindows as filewindows
from s3kv.backends import FileBackend
from s3kv.backends.base import Pieces
from s3kv.errors import InvalidInput, ObjectMissing
from s3kv.sizes import MiB

PART = 5 * MiB


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def test_parts_write_no_files_and_the_upload_closes_its_descriptor(
        tmp_path: Path) -> None:
    backend = await FileBackend(tmp_path, fsync=False).open()
    before = _open_fds()
    upload = await backend.create_multipart("seg/a", PART)
    data = os.urandom(2 * PART + 123)
    etags = [await backend.upload_part("seg/a", upload, n + 1,
                                       data[n * PART:(n + 1) * PART]) for n in range(3)]
    assert sorted(p.name for p in (tmp_path / ".uploads" / upload).iterdir()) == \
        ["data", "meta.json"]
    assert len(_open_fds() - before) == 1  # the data file, open while the upload lives
    await backend.complete_multipart("seg/a", upload, list(enumerate(etags, 1)))
    assert await backend.get_object("seg/a") == data
    assert _open_fds() - before == set()
    assert not (tmp_path / ".uploads" / upload).exists()

    aborted = await backend.create_multipart("seg/b", PART)
    await backend.upload_part("seg/b", aborted, 1, data[:PART])
    await backend.abort_multipart("seg/b", aborted)
    assert _open_fds() - before == set()
    with pytest.raises(ObjectMissing):
        await backend.upload_part("seg/b", aborted, 2, data[:PART])


async def test_parts_are_checked_at_completion(tmp_path: Path) -> None:
    backend = await FileBackend(tmp_path, fsync=False).open()
    upload = await backend.create_multipart("seg/c", PART)
    with pytest.raises(InvalidInput, match="over part_size"):
        await backend.upload_part("seg/c", upload, 1, bytes(PART + 1))
    e1 = await backend.upload_part("seg/c", upload, 1, bytes(PART - 1))
    e2 = await backend.upload_part("seg/c", upload, 2, bytes(10))
    with pytest.raises(InvalidInput, match="all but the last"):
        await backend.complete_multipart("seg/c", upload, [(1, e1), (2, e2)])
    with pytest.raises(InvalidInput, match="in order"):
        await backend.complete_multipart("seg/c", upload, [(2, e2)])
    e1 = await backend.upload_part("seg/c", upload, 1, bytes(PART))  # sent again, whole
    one_part = await backend.create_multipart("seg/d", PART)
    d1 = await backend.upload_part("seg/d", one_part, 1, bytes(PART))
    with pytest.raises(InvalidInput, match="not written"):
        await backend.complete_multipart("seg/d", one_part, [(1, d1), (2, "2-10")])
    await backend.complete_multipart("seg/c", upload, [(1, e1), (2, e2)])
    assert await backend.head_object("seg/c") == PART + 10
    with pytest.raises(InvalidInput):
        await backend.upload_part("seg/c", "../x", 1, b"x")


async def test_an_upload_of_another_process_is_listed_and_aborted_not_continued(
        tmp_path: Path) -> None:
    first = await FileBackend(tmp_path, fsync=False).open()
    orphan = await first.create_multipart("seg/o", PART)
    await first.upload_part("seg/o", orphan, 1, bytes(PART))
    later = await FileBackend(tmp_path, fsync=False).open()  # as after a restart
    assert [(u.key, u.upload_id) for u in await later.list_multipart_uploads("seg/")] == \
        [("seg/o", orphan)]
    with pytest.raises(ObjectMissing):
        await later.upload_part("seg/o", orphan, 2, bytes(PART))
    with pytest.raises(ObjectMissing):
        await later.complete_multipart("seg/o", orphan, [(1, "1-x")])
    await later.abort_multipart("seg/o", orphan)
    assert await later.list_multipart_uploads("seg/") == []
    await first.abort_multipart("seg/o", orphan)  # its own view of it ends quietly too


async def test_an_abort_waits_for_the_part_being_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The descriptor is closed only after the write in flight: a closed (or reused)
    descriptor under a write would lose it or write into another file."""
    backend = await FileBackend(tmp_path, fsync=False).open()
    upload = await backend.create_multipart("seg/w", PART)
    writing = threading.Event()
    release = threading.Event()
    real_write = fileuploads.write_at
    wrote: list[int] = []

    def slow_write(fd: int, data: Pieces, offset: int) -> None:
        writing.set()
        release.wait(5)
        real_write(fd, data, offset)  # raises EBADF if the descriptor was closed under it
        wrote.append(offset)

    monkeypatch.setattr(fileuploads, "write_at", slow_write)
    part = asyncio.create_task(backend.upload_part("seg/w", upload, 1, bytes(PART)))
    await asyncio.to_thread(writing.wait, 5)
    abort = asyncio.create_task(backend.abort_multipart("seg/w", upload))
    await asyncio.sleep(0.1)
    assert not abort.done()  # it waits for the write
    release.set()
    assert await part == f"1-{PART}"
    await abort
    assert wrote == [0]
    assert not (tmp_path / ".uploads" / upload).exists()


async def test_a_window_lent_is_the_uploads_bytes_and_is_not_written_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = await FileBackend(tmp_path, fsync=False).open()
    upload = await backend.create_multipart("seg/w", PART)
    offset, data = PART + 4096, os.urandom(PART - 4096 + 3 * MiB)  # across a part boundary
    window = await backend.upload_window("seg/w", upload, offset, len(data))
    assert window is not None and not window.readonly and len(window) == len(data)
    window[:] = data  # as a body received into it
    written: list[int] = []
    real = fileuploads.write_at
    monkeypatch.setattr(fileuploads, "write_at", lambda fd, pieces, at: (
        written.append(sum(len(p) for p in fileuploads.pieces_of(pieces))),
        real(fd, pieces, at))[1])
    head, gap = os.urandom(PART), os.urandom(4096)
    cut = PART - 4096
    etags = [await backend.upload_part("seg/w", upload, 1, [head[:4096], head[4096:]]),
             await backend.upload_part("seg/w", upload, 2, [gap, window[:cut]]),
             await backend.upload_part("seg/w", upload, 3, [window[cut:]])]
    # only what is not the window at its own place is written
    assert written == [PART, 4096]
    await backend.complete_multipart("seg/w", upload, list(enumerate(etags, 1)))
    assert await backend.get_object("seg/w") == head + gap + data


async def test_a_window_piece_out_of_place_is_written(tmp_path: Path) -> None:
    backend = await FileBackend(tmp_path, fsync=False).open()
    upload = await backend.create_multipart("seg/x", PART)
    window = await backend.upload_window("seg/x", upload, 0, PART)
    assert window is not None
    window[:] = os.urandom(PART)
    other = bytes(window)
    # part 2 made of the window's bytes: not their place, so they are copied there
    etags = [await backend.upload_part("seg/x", upload, 1, [window]),
             await backend.upload_part("seg/x", upload, 2, [window[:1000]])]
    await backend.complete_multipart("seg/x", upload, list(enumerate(etags, 1)))
    assert await backend.get_object("seg/x") == other + other[:1000]


async def test_populated_windows_and_parts_in_place_need_no_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window onto pages the file's mapping has populated is lent on the event loop, and a
    part whose bytes are all in such a window at their place is recorded there: no worker
    thread for either (a hop's CPU and wake-ups, per batch put and per part: issue 17,
    session 35). Anything that needs a system call that may wait, or a write, still goes to a
    thread."""
    backend = await FileBackend(tmp_path, fsync=False).open()
    loop = threading.get_ident()
    calls: list[tuple[str, bool]] = []  # (what, on the loop's thread)
    for name in ("window", "write_part"):
        real = getattr(fileuploads.FileUploads, name)

        def spy(self: fileuploads.FileUploads, *args: object, _real: object = real,
                _name: str = name) -> object:
            calls.append((_name, threading.get_ident() == loop))
            return _real(self, *args)  # type: ignore[operator]
        monkeypatch.setattr(fileuploads.FileUploads, name, spy)

    upload = await backend.create_multipart("seg/p", PART)
    first = await backend.upload_window("seg/p", upload, 0, 2 * PART)  # pages populated
    assert first is not None and calls == [("window", False)]
    data = os.urandom(2 * PART)
    first[:] = data
    calls.clear()
    again = await backend.upload_window("seg/p", upload, PART, PART)  # populated: at once
    assert again is not None and calls == []
    assert bytes(again) == data[PART:]
    # the first window's lending populated the pages after it too (POPULATE_AHEAD: small
    # blocks received one after another each find theirs ready)
    later = await backend.upload_window("seg/p", upload, 2 * PART, PART)
    assert later is not None and calls == []
    far = await backend.upload_window("seg/p", upload, 2 * PART + fileuploads.POPULATE_AHEAD,
                                      PART)  # past them: pages to populate
    assert far is not None and calls == [("window", False)]
    del far
    later[:] = tail = os.urandom(PART)
    calls.clear()
    etags = [await backend.upload_part("seg/p", upload, 1, [first[:PART]]),
             await backend.upload_part("seg/p", upload, 2, [again])]
    assert calls == []  # in place: recorded, nothing written, no thread
    etags.append(await backend.upload_part("seg/p", upload, 3, [tail]))  # not a window
    assert calls == [("write_part", False)]
    await backend.complete_multipart("seg/p", upload, list(enumerate(etags, 1)))
    assert await backend.get_object("seg/p") == data + tail


async def test_a_window_is_not_lent_on_the_loop_while_a_part_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = await FileBackend(tmp_path, fsync=False).open()
    upload = await backend.create_multipart("seg/q", PART)
    assert await backend.upload_window("seg/q", upload, 0, PART) is not None
    writing, release = threading.Event(), threading.Event()
    real = fileuploads.write_at

    def slow_write(fd: int, pieces: Pieces, at: int) -> None:
        writing.set()
        release.wait(5)
        real(fd, pieces, at)
    monkeypatch.setattr(fileuploads, "write_at", slow_write)
    part = asyncio.create_task(backend.upload_part("seg/q", upload, 2, os.urandom(PART)))
    assert await asyncio.to_thread(writing.wait, 5)
    # the pages are populated, but the part's writer holds the file: the window is asked of a
    # thread, which waits for the write while the loop runs on (a loop that waited for the
    # lock would stall here until the write gave up waiting, 5 s)
    started = time.monotonic()
    window = asyncio.create_task(backend.upload_window("seg/q", upload, 0, PART))
    await asyncio.sleep(0.05)
    assert time.monotonic() - started < 1 and not window.done()
    release.set()
    assert await part == f"2-{PART}"
    assert await window is not None


async def test_a_window_is_lent_when_the_pages_after_it_cannot_be_had(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Populating ahead is a bonus: where the filesystem cannot give those pages (nearly
    full), the window asked for is still lent."""
    backend = await FileBackend(tmp_path, fsync=False).open()
    real = filewindows.FileMap.window
    asked: list[int] = []

    def full_ahead(self: filewindows.FileMap, offset: int, length: int,
                   ahead: int = 0) -> object:
        asked.append(ahead)
        if ahead:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, offset, length)
    monkeypatch.setattr(filewindows.FileMap, "window", full_ahead)
    upload = await backend.create_multipart("seg/f", PART)
    window = await backend.upload_window("seg/f", upload, 0, PART)
    assert window is not None and len(window) == PART
    assert asked == [fileuploads.POPULATE_AHEAD, 0]
    window[:] = data = os.urandom(PART)
    etag = await backend.upload_part("seg/f", upload, 1, [window])
    await backend.complete_multipart("seg/f", upload, [(1, etag)])
    assert await backend.get_object("seg/f") == data


async def test_windows_lent_one_after_another_are_slices_of_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small blocks landing one after another (the plain lane's 256 KiB PUTs) each ask for a
    window: the first lent at once spans the populated pages after it too (``SPARE_WINDOW``
    at most), and the next ones are slices of it, with no new array over the mapping, no lock
    and no ``fstat`` (15 us of the event loop per PUT before: issue 17, session 38). Their
    bytes are in place for the parts, as any window's are."""
    backend = await FileBackend(tmp_path, fsync=False).open()
    upload = await backend.create_multipart("seg/s", PART)
    first = await backend.upload_window("seg/s", upload, 0, PART)  # populates ahead
    assert first is not None
    lent: list[int] = []
    real = filewindows.FileMap.window

    def counted(self: filewindows.FileMap, offset: int, length: int, ahead: int = 0) -> object:
        lent.append(length)
        return real(self, offset, length, ahead)
    monkeypatch.setattr(filewindows.FileMap, "window", counted)
    block = 256 * 1024
    views = [backend.upload_window_now("seg/s", upload, PART + i * block, block)
             for i in range(4)]
    assert all(v is not None and len(v) == block for v in views)
    assert len(lent) == 1 and lent[0] == fileuploads.SPARE_WINDOW  # one array for the four
    assert all(v is not None and v.obj is views[0].obj for v in views)  # type: ignore[union-attr]
    # past the populated pages: not at once (a thread populates them)
    assert backend.upload_window_now("seg/s", upload, PART + fileuploads.POPULATE_AHEAD, block) \
        is None
    data = os.urandom(PART)
    first[:] = head = os.urandom(PART)
    for i, v in enumerate(views):
        assert v is not None
        v[:] = data[i * block:(i + 1) * block]
    written: list[int] = []
    real_write = fileuploads.write_at
    monkeypatch.setattr(fileuploads, "write_at", lambda fd, pieces, at: (
        written.append(sum(len(p) for p in fileuploads.pieces_of(pieces))),
        real_write(fd, pieces, at))[1])
    etags = [await backend.upload_part("seg/s", upload, 1, [first]),
             await backend.upload_part("seg/s", upload, 2, [*views, data[4 * block:]])]
    assert written == [PART - 4 * block]  # the slices are in place: only the rest is written
    await backend.complete_multipart("seg/s", upload, list(enumerate(etags, 1)))
    assert await backend.get_object("seg/s") == head + data
