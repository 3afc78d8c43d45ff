"""Memory maps of the file backend: a range already in memory is viewed on the event loop
(no worker thread), anything else is left to the thread; a view always pins its bytes."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from s3kv.backends.filemaps import ANSWER_PAGES, PAGE, MappedFiles, in_memory


def test_in_memory_tells_written_pages_from_holes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with open(path, "wb") as fh:
        fh.write(os.urandom(4 * PAGE))
        fh.truncate(64 * PAGE)  # the rest is a hole: no page of it is in memory
    fd = os.open(path, os.O_RDONLY)
    try:
        m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    assert in_memory(m, 0, 4 * PAGE)
    assert in_memory(m, 100, 3 * PAGE + 5)
    assert not in_memory(m, 2 * PAGE, 40 * PAGE)
    assert not in_memory(m, 10, 10)  # an empty range says nothing
    m.close()


def test_view_now_only_for_mapped_files_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    data = os.urandom(8 * PAGE)
    with open(path, "wb") as fh:
        fh.write(data)
        fh.truncate(16 * PAGE)
    maps = MappedFiles()
    assert maps.view_now(path, 0, PAGE) is None  # not mapped yet: the thread maps it
    first = maps.view(path, 0, PAGE)
    assert bytes(first) == data[:PAGE]
    now = maps.view_now(path, PAGE + 7, 3 * PAGE)
    assert now is not None and bytes(now) == data[PAGE + 7:4 * PAGE + 7]
    assert maps.view_now(path, 6 * PAGE, 4 * PAGE) is None  # reaches into the hole
    # a view handed out on the loop pins the file like any other
    first.release()
    assert maps.move_if_unmapped(path, tmp_path / "moved") is None
    now.release()
    assert maps.move_if_unmapped(path, tmp_path / "moved") == []  # moved; no mapping kept
    assert maps.view_now(path, 0, PAGE) is None


def test_view_now_populates_each_page_once_per_mapping(tmp_path: Path) -> None:
    """A range on the loop is faulted in only if a page of it was not before (the populate
    call walks every page of the range, present or not); the worker thread's path always
    faults in, and a file mapped afresh starts over."""
    path = tmp_path / "seg"
    data = os.urandom(32 * PAGE)
    path.write_bytes(data)
    maps = MappedFiles()
    maps.view(path, 0, PAGE).release()
    assert maps.fault_ins == 1
    for _ in range(3):  # pages 1-4: populated by the first of these views only
        view = maps.view_now(path, PAGE, 4 * PAGE)
        assert view is not None and bytes(view) == data[PAGE:5 * PAGE]
        view.release()
    assert maps.fault_ins == 2
    view = maps.view_now(path, 3 * PAGE + 1, 3 * PAGE)  # reaches page 6: not yet
    assert view is not None and bytes(view) == data[3 * PAGE + 1:6 * PAGE + 1]
    view.release()
    assert maps.fault_ins == 3
    maps.view(path, PAGE, PAGE).release()  # the thread's path: always
    assert maps.fault_ins == 4
    maps.forget(path)  # replaced: mapped afresh, populated afresh
    maps.view(path, 0, PAGE).release()
    view = maps.view_now(path, PAGE, PAGE)
    assert view is not None
    view.release()
    assert maps.fault_ins == 6


def test_in_memory_with_a_reused_answer_buffer(tmp_path: Path) -> None:
    """view_now reuses one buffer for mincore's answers: what an earlier, longer range left in
    it must not make a shorter one look resident, and a range longer than it gets its own."""
    path = tmp_path / "seg"
    resident = ANSWER_PAGES + 50
    with open(path, "wb") as fh:
        fh.write(os.urandom(resident * PAGE))
        fh.truncate(2 * resident * PAGE)  # the pages after ``resident`` are a hole
    maps = MappedFiles()
    maps.view(path, 0, PAGE)  # mapped
    assert maps.view_now(path, 0, (ANSWER_PAGES + 20) * PAGE) is not None  # > the buffer
    assert maps.view_now(path, 0, (ANSWER_PAGES - 1) * PAGE) is not None  # fills the buffer
    assert maps.view_now(path, (resident - 1) * PAGE, 2 * PAGE) is None  # resident, then hole
    assert maps.view_now(path, (resident + 20) * PAGE, PAGE) is None
    ok = maps.view_now(path, (resident - 2) * PAGE, 2 * PAGE)
    assert ok is not None and len(ok) == 2 * PAGE
    ok.release()
