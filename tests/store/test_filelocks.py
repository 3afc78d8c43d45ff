"""The file backend writes one part at a time into a file (filelocks.py): the parts of one upload
never overlap in their writes, other uploads' writes run beside them, every byte reads back,
and a lock lives only while it is used."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

import s3kv.backends.fileuploads as fileuploads
from s3kv.backends import FileBackend
from s3kv.backends.base import Pieces
from s3kv.backends.filelocks import FileLocks
from s3kv.sizes import KiB

PART = 64 * KiB


def test_one_holder_per_name_and_none_left_after() -> None:
    locks = FileLocks()
    inside: dict[str, int] = {"a": 0}
    most = 0
    guard = threading.Lock()

    def write(name: str) -> None:
        nonlocal most
        for _ in range(20):
            with locks.held(name):
                with guard:
                    inside[name] += 1
                    most = max(most, inside[name])
                time.sleep(0.001)
                with guard:
                    inside[name] -= 1

    threads = [threading.Thread(target=write, args=("a",)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1
    assert len(locks) == 0


def test_different_names_are_held_at_once() -> None:
    locks = FileLocks()
    both = threading.Barrier(2, timeout=5)  # broken if the second name had to wait
    errors: list[BaseException] = []

    def write(name: str) -> None:
        try:
            with locks.held(name):
                both.wait()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(locks) == 0


def test_a_name_whose_holder_raised_is_released() -> None:
    locks = FileLocks()
    with pytest.raises(OSError), locks.held("a"):
        raise OSError("disk full")
    assert len(locks) == 0
    with locks.held("a"):  # free again
        pass


async def test_parts_of_one_upload_are_written_one_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four parts of each of two uploads sent at once: never two writes into one upload's
    file together, the two uploads' first writes together, every byte in place."""
    backend = await FileBackend(tmp_path, fsync=False).open()
    ids = {key: await backend.create_multipart(key, PART) for key in ("seg/a", "seg/b")}
    active = {key: 0 for key in ids}
    most = {key: 0 for key in ids}
    first_of_each = threading.Barrier(2, timeout=5)
    met: list[bool] = []
    guard = threading.Lock()
    real_write = fileuploads.write_at

    def upload_of(fd: int) -> str:
        ino = os.fstat(fd).st_ino
        for key, upload_id in ids.items():
            if (tmp_path / ".uploads" / upload_id / "data").stat().st_ino == ino:
                return key
        raise AssertionError("a write into no upload's file")

    def watched_write(fd: int, data: Pieces, offset: int) -> None:
        key = upload_of(fd)
        with guard:
            active[key] += 1
            most[key] = max(most[key], active[key])
            first = len(met) < 2 and offset == 0
            if first:
                met.append(True)
        if first:
            first_of_each.wait()  # both uploads' part 1 are being written together
        time.sleep(0.01)
        real_write(fd, data, offset)
        with guard:
            active[key] -= 1

    monkeypatch.setattr(fileuploads, "write_at", watched_write)
    data = {key: os.urandom(4 * PART) for key in ids}
    sends = [backend.upload_part(key, ids[key], n + 1, data[key][n * PART:(n + 1) * PART])
             for n in range(4) for key in ids]
    etags = await asyncio.gather(*sends)
    assert most == {"seg/a": 1, "seg/b": 1}
    for i, key in enumerate(ids):
        parts = [(n + 1, etags[n * 2 + i]) for n in range(4)]
        await backend.complete_multipart(key, ids[key], parts)
        assert await backend.get_object(key) == data[key]


def test_held_if_free_takes_a_free_lock_and_never_waits_for_a_held_one() -> None:
    locks = FileLocks()
    with locks.held_if_free("a") as held:
        assert held
        with locks.held_if_free("a") as again:  # held (here): not taken, no wait
            assert not again
    taken, release = threading.Event(), threading.Event()

    def writer() -> None:
        with locks.held("b"):
            taken.set()
            release.wait(5)

    thread = threading.Thread(target=writer)
    thread.start()
    assert taken.wait(5)
    started = time.monotonic()
    with locks.held_if_free("b") as held:
        assert not held
    assert time.monotonic() - started < 0.5
    release.set()
    thread.join()
    with locks.held_if_free("b") as held:
        assert held
    assert len(locks) == 0
