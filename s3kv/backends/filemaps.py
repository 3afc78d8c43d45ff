"""Read-only memory maps of the file backend's objects, kept for reuse (its ``view_range``).

A GET of a sealed block on the file backend used to ``pread`` the range into a fresh buffer
and copy it again into a block buffer: two copies, and a page fault per 4 KiB of fresh memory
(~870K faults per GiB read). Instead the segment file is mapped once, read-only, and a block is
a view of the mapping: the checksum reads it and the socket sends it straight from the page
cache. ``view`` runs in a worker thread and faults the range in there (``MADV_POPULATE_READ``,
Linux 5.14+; else ``MADV_WILLNEED`` and a touch of every page), so reading the view on the
event loop never waits on the disk. A range of a file already mapped whose pages are all in
memory (``mincore``: just written, or read before) is viewed on the loop at once (``view_now``):
the hand-off to a worker thread was most of a small GET's read cost. Each mapping remembers
which of its pages it has populated already, and asks the kernel to populate only ranges with
a page it has not (``MADV_POPULATE_READ`` walks every page table entry of the range even when
all are present: ~11 us per 256 KiB here, ~5% of a small GET's CPU).

At most ``limit`` files stay mapped (least recently used first out). A mapping is never closed
by hand: dropped from the cache, it is unmapped when the last view of it is released, so a
view handed out stays valid even if its file is deleted meanwhile (an eviction). Objects are
immutable once published; whoever replaces or deletes one calls ``forget``, or, to write over
the file later (recycle.py), ``move_if_unmapped``: the file is moved only while no view of it
is alive, and mapping and moving exclude each other, so no view ever sees the next object.
The same holds for the writable windows an upload lent onto its data file (blocks received
straight into a segment, fileuploads.py): published, the file's mappings are ``adopt``-ed.
The last ``MAX_KEPT`` files' mappings are also kept (filewindows.py): when such a file is
moved to be recycled with none of its windows alive, its mapping goes with it, for the next
upload to lend windows from without new page tables.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from s3kv.backends.filewindows import FileMap
from s3kv.backends.pages import (
    MADV_POPULATE_READ,
    PAGE,
    address_of,
    advise,
    close_mapping,
    in_memory,
    page_span,
)

#: files mapped at once (a 256 MiB segment costs address space and page tables, no memory)
MAX_MAPS = 64
#: files whose writable mappings are kept for reuse once recycled (each holds a descriptor,
#: and page tables for what it populated: 0.5 MiB per 256 MiB segment)
MAX_KEPT = 64
#: pages of the answer buffer view_now reuses: 1 MiB, the file backend's NOW_MAX, plus one
#: for a range that does not start on a page
ANSWER_PAGES = 257


class _Cached(NamedTuple):
    mapping: mmap.mmap
    #: one byte per page, 1 once it was populated (changed under the lock)
    populated: bytearray
    #: the mapping's address_of
    base: int


class MappedFiles:
    def __init__(self, limit: int = MAX_MAPS) -> None:
        self.limit = limit
        self._maps: OrderedDict[Path, _Cached] = OrderedDict()
        #: every mapping still alive, cached or only held by views handed out
        self._live: weakref.WeakValueDictionary[Path, mmap.mmap] = weakref.WeakValueDictionary()
        #: mappings of a file made elsewhere (adopt), while any is alive
        self._adopted: dict[Path, weakref.WeakSet[mmap.mmap]] = {}
        #: the writable mappings of the last files adopted, kept to be reused
        self._kept: OrderedDict[Path, list[FileMap]] = OrderedDict()
        self._lock = threading.Lock()
        self._populate = True  # until the kernel says it has no MADV_POPULATE_READ
        self.fault_ins = 0  # ranges faulted in (a counter, for tests)
        #: mincore's answer for view_now, reused under the lock (a longer range, which the
        #: file backend never asks on the loop, gets a buffer of its own in in_memory)
        self._vec = ctypes.create_string_buffer(ANSWER_PAGES)

    def view(self, path: Path, start: int, length: int) -> memoryview:
        """Bytes [start, start+length) of the file (fewer at its end), faulted in. Blocking:
        call it in a worker thread. OSError (FileNotFoundError: no such file) as ``open``."""
        with self._lock:  # mapped and viewed under the lock: move_if_unmapped sees the view
            m = self._mapping(path)
            end = min(start + length, len(m)) if m is not None else 0
            if m is None or end <= start:
                return memoryview(b"")
            view = memoryview(m)[start:end]
        # always: the pages may have left memory since (mincore said so to view_now)
        self._fault_in(m, start, end)
        self._mark_populated(path, m, start, end)
        return view

    def view_now(self, path: Path, start: int, length: int) -> memoryview | None:
        """As :meth:`view`, without blocking, for the event loop: only for a file mapped
        already whose range is all in memory; None otherwise (call :meth:`view` in a thread)."""
        with self._lock:
            cached = self._maps.get(path)
            if cached is None:
                return None
            m = cached.mapping
            end = min(start + length, len(m))
            if end <= start:
                return memoryview(b"")
            if not in_memory(m, start, end, cached.base, self._vec):
                return None
            self._maps.move_to_end(path)
            view = memoryview(m)[start:end]
            todo = cached.populated.find(0, *page_span(start, end)) >= 0
        if todo:
            self._fault_in(m, start, end)  # no disk read: page tables only
            self._mark_populated(path, m, start, end)
        return view

    def _mark_populated(self, path: Path, m: mmap.mmap, start: int, end: int) -> None:
        first, last = page_span(start, end)
        with self._lock:
            cached = self._maps.get(path)
            if cached is not None and cached.mapping is m:  # else forgotten or mapped afresh
                cached.populated[first:last] = b"\1" * (last - first)

    def forget(self, path: Path) -> None:
        """The file at ``path`` is being replaced or deleted: map it afresh next time (views
        of the old mapping stay valid)."""
        with self._lock:
            self._maps.pop(path, None)
            self._live.pop(path, None)
            self._adopted.pop(path, None)
            kept = self._kept.pop(path, [])
        for fm in kept:
            fm.close()

    def adopt(self, path: Path, maps: Iterable[FileMap]) -> None:
        """The writable mappings of the file now at ``path``, made elsewhere (an upload lent
        windows from them, published there): :meth:`move_if_unmapped` leaves the file be
        while a view of one of them is alive, and hands them over with it otherwise."""
        maps = list(maps)
        dropped: list[FileMap] = []
        with self._lock:
            self._adopted.setdefault(path, weakref.WeakSet()).update(fm.mapping for fm in maps)
            if maps:
                self._kept[path] = maps
            while len(self._kept) > MAX_KEPT:
                dropped += self._kept.popitem(last=False)[1]
        for fm in dropped:  # still watched through _adopted while a window is alive
            fm.close()

    def move_if_unmapped(self, path: Path, dest: Path) -> list[FileMap] | None:
        """Rename ``path`` to ``dest`` unless a view of its mapping is still alive (then
        None: leave it be); the file's kept writable mappings (:meth:`adopt`), for it to be
        written over through them. OSError from the rename. Blocking."""
        with self._lock:
            self._maps.pop(path, None)
            m = self._live.pop(path, None)
            if m is not None and not close_mapping(m):
                self._live[path] = m
                return None
            kept = self._kept.pop(path, [])
            adopted = self._adopted.pop(path, None)
            ours = {id(fm.mapping) for fm in kept}  # asked whether in use, never closed here
            in_use = [fm.mapping for fm in kept if fm.in_use] + [
                a for a in adopted or () if id(a) not in ours and not close_mapping(a)]
            if in_use:
                self._adopted[path] = weakref.WeakSet([*in_use, *(fm.mapping for fm in kept)])
                if kept:
                    self._kept[path] = kept
                return None
            os.rename(path, dest)
            return kept

    def clear(self) -> None:
        with self._lock:
            self._maps.clear()
            self._live.clear()
            self._adopted.clear()
            kept, self._kept = self._kept, OrderedDict()
        for maps in kept.values():
            for fm in maps:
                fm.close()

    def _mapping(self, path: Path) -> mmap.mmap | None:
        """The file's mapping (cached, or mapped now); the caller holds the lock."""
        cached = self._maps.get(path)
        if cached is not None:
            self._maps.move_to_end(path)
            return cached.mapping
        m = self._live.get(path)  # dropped from the cache, still alive through a view
        if m is None:
            fd = os.open(path, os.O_RDONLY)
            try:
                if os.fstat(fd).st_size == 0:
                    return None  # nothing to map (mmap refuses an empty file)
                m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            self._live[path] = m
        self._maps[path] = _Cached(m, bytearray(page_span(0, len(m))[1]), address_of(m))
        while len(self._maps) > self.limit:
            self._maps.popitem(last=False)
        return m

    def _fault_in(self, m: mmap.mmap, start: int, end: int) -> None:
        self.fault_ins += 1
        first = start - start % PAGE
        if self._populate:
            try:
                advise(m, MADV_POPULATE_READ, first, end - first)
                return
            except OSError:
                self._populate = False  # an older kernel: read ahead, then touch each page
        m.madvise(mmap.MADV_WILLNEED, first, end - first)
        view = memoryview(m)
        try:
            sum(view[i] for i in range(first, end, PAGE))
        finally:
            view.release()
