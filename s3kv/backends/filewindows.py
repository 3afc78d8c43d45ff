"""One writable mapping per data file, lent out in windows, kept with the file when it is
recycled (file backend).

A body received straight into its segment lands in a window onto the segment's data file
(fileuploads.py). A new mapping per window meant new page-table entries for every page
(``MADV_POPULATE_WRITE``) and their teardown when the window was let go: ~2.5 ms per 32 MiB
window here (nested virtualisation makes page tables dear), on every byte landed. A
:class:`FileMap` maps the data file once and lends slices of it; it knows which pages it has
populated, and it stays with the file: published, it is adopted with it (filemaps.py), and
when the segment is evicted and its file recycled, the next upload that takes the file takes
its mapping too, page tables and all. With the recycled files of a store at capacity, a landed
byte then costs no page-table work at all (32 MiB PUTs: 11-13 % more per second, 18 % less
gateway CPU per GiB in an A/B here).

Each window is its own exporter (a numpy array over the mapping), so the mapping knows whether
any view of it is alive (:attr:`FileMap.in_use`): a file is only recycled, mapping and all,
once none is, so no view ever sees the next object's bytes. Page-table entries a truncation
removes (a short segment published) are marked unpopulated again, so every window lent has
its pages allocated (a write into it never faults for want of space).
"""

from __future__ import annotations

import mmap
import weakref

import numpy as np
import numpy.typing as npt

from s3kv.backends.pages import (
    MADV_POPULATE_WRITE,
    PAGE,
    address_of,
    advise,
    close_mapping,
    page_span,
)

#: the least a data file is mapped at (a fresh file grows to it, sparse, when first lent)
MAP_MIN = 64 * 1024 * 1024


class FileMap:
    """A shared writable mapping of bytes [0, ``length``) of the file open as ``fd`` (which
    must be at least that long now)."""

    def __init__(self, fd: int, length: int) -> None:
        self.mapping = mmap.mmap(fd, length)
        self.address = address_of(self.mapping)  # of its first byte (fixed while it lives)
        #: one byte per page: 1 once its page-table entry was populated (the page allocated)
        self.populated = bytearray(page_span(0, length)[1])
        #: the windows lent and alive (id -> array; arrays are not hashable)
        self._lent: weakref.WeakValueDictionary[int, npt.NDArray[np.uint8]] = \
            weakref.WeakValueDictionary()

    def __len__(self) -> int:
        return len(self.mapping)

    def ready(self, offset: int, length: int) -> bool:
        """Whether bytes [offset, offset+length) are mapped with their pages populated (a
        :meth:`window` onto them makes no system call)."""
        first, last = page_span(offset, offset + length)
        return offset + length <= len(self.mapping) and self.populated.find(0, first, last) < 0

    def ready_until(self, start: int, limit: int) -> int:
        """How far from ``start`` (a page boundary) the mapping's pages are populated, up to
        ``limit`` at most."""
        first, last = page_span(start, min(limit, len(self.mapping)))
        hole = self.populated.find(0, first, last)
        return min(limit, len(self.mapping)) if hole < 0 else max(start, hole * PAGE)

    def window(self, offset: int, length: int, ahead: int = 0) -> npt.NDArray[np.uint8]:
        """Bytes [offset, offset+length) as an array over the mapping (a ``memoryview`` of it
        is the window), their pages populated first (blocking, without the GIL), and the
        ``ahead`` bytes after them too (so that the next windows, small blocks received one
        after another, are :meth:`ready`). The caller has made the file at least ``offset +
        length + ahead`` bytes long. OSError: the kernel could not allocate them (a full
        filesystem) or has no MADV_POPULATE_WRITE."""
        first, last = page_span(offset, min(offset + length + ahead, len(self.mapping)))
        todo = self.populated.find(0, first, last)
        if todo >= 0:
            upto = self.populated.rfind(0, first, last) + 1
            advise(self.mapping, MADV_POPULATE_WRITE, todo * PAGE, (upto - todo) * PAGE)
            self.populated[todo:upto] = b"\1" * (upto - todo)
        arr = np.frombuffer(self.mapping, np.uint8, count=length, offset=offset)
        self._lent[id(arr)] = arr
        return arr

    def truncated(self, length: int) -> None:
        """The file was cut to ``length`` bytes: the kernel unmapped the pages past it."""
        first = page_span(0, length)[1]
        if first < len(self.populated):
            self.populated[first:] = bytes(len(self.populated) - first)

    @property
    def in_use(self) -> bool:
        """Whether a window (or a view of one) is alive."""
        return len(self._lent) > 0

    def close(self) -> bool:
        """Unmap (page tables dropped first, without the GIL) unless a window is alive: then
        False, left to go with its last view."""
        return not self.in_use and close_mapping(self.mapping)
