"""Page-level calls on memory maps (s3kv/backends/pages.py): ``advise`` populates a mapping as
``mmap.madvise`` does, but lets other threads run meanwhile (the event loop, in the gateway)."""

from __future__ import annotations

import mmap
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3kv.backends.pages import (
    MADV_POPULATE_WRITE,
    PAGE,
    advise,
    close_mapping,
    drop_pages,
    in_memory,
)

SIZE = 128 << 20


@pytest.fixture
def mapping(tmp_path: Path) -> Iterator[mmap.mmap]:
    """A writable shared mapping of a sparse file, in memory-backed storage where there is one
    (populating it writes no disk)."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    path = base / f"s3kv-test-pages-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, SIZE)
        m = mmap.mmap(fd, SIZE)
    finally:
        os.close(fd)
        path.unlink()
    yield m
    if not m.closed:
        m.close()


def test_advise_populates(mapping: mmap.mmap) -> None:
    assert not in_memory(mapping, 0, 4 * PAGE)  # a hole
    advise(mapping, MADV_POPULATE_WRITE, 0, 4 * PAGE)
    assert in_memory(mapping, 0, 4 * PAGE)
    assert not in_memory(mapping, 4 * PAGE, 8 * PAGE)  # only the range asked for


def test_advise_failure_is_an_os_error(mapping: mmap.mmap) -> None:
    with pytest.raises(OSError):
        advise(mapping, 12345)  # no such advice: EINVAL
    with pytest.raises(OSError):
        advise(mapping, MADV_POPULATE_WRITE, 1, PAGE)  # not on a page boundary


def test_drop_pages_keeps_the_data(mapping: mmap.mmap) -> None:
    mapping[:8] = b"s3kv-kv!"
    mapping[5 * PAGE:5 * PAGE + 4] = b"tail"
    drop_pages(mapping)
    assert mapping[:8] == b"s3kv-kv!"  # faulted back in from the file
    assert mapping[5 * PAGE:5 * PAGE + 4] == b"tail"


def test_close_mapping_only_without_views(mapping: mmap.mmap) -> None:
    view = memoryview(mapping)[:PAGE]
    assert not close_mapping(mapping)  # a view is alive: left open, still readable
    assert bytes(view[:4]) == b"\0\0\0\0"
    view.release()
    assert close_mapping(mapping)
    assert mapping.closed
    drop_pages(mapping)  # closed: nothing to do


def test_advise_lets_other_threads_run(mapping: mmap.mmap) -> None:
    """A populate of 128 MiB takes milliseconds; ``mmap.madvise`` holds the GIL through it, so
    no other thread runs Python meanwhile. Fails with ``mapping.madvise`` in ``advise``: with
    the GIL handed over every 0.1 ms, the other thread then runs only at the call's edges,
    never in the middle third of it."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        if _ran_meanwhile(mapping):
            return
    finally:
        sys.setswitchinterval(interval)
    pytest.fail("no other thread ran while advise populated the mapping")


def _populate(mapping: mmap.mmap, span: list[float], stop: threading.Event) -> None:
    span.append(time.perf_counter())
    advise(mapping, MADV_POPULATE_WRITE)
    span.append(time.perf_counter())
    stop.set()


def _ran_meanwhile(mapping: mmap.mmap) -> bool:
    for _ in range(5):  # a busy machine may not run the other thread within one call
        span: list[float] = []
        beats: list[float] = []
        stop = threading.Event()
        worker = threading.Thread(target=_populate, args=(mapping, span, stop))
        worker.start()
        while not stop.is_set():
            beats.append(time.perf_counter())
        worker.join()
        start, end = span
        third = (end - start) / 3
        if any(start + third < t < end - third for t in beats):
            return True
        advise(mapping, mmap.MADV_DONTNEED)  # unmapped again: the next populate walks it all
    return False
