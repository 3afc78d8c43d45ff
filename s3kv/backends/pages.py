"""Page-level calls on the file backend's memory maps, made without holding the GIL.

``mmap.madvise`` keeps the GIL for the whole system call. ``MADV_POPULATE_WRITE`` over a
window lent for a 32 MiB body walks 8,192 page-table entries: ~2 ms here when nothing else
runs, 9 ms (median, 16 ms at p90) while the gateway took 32 MiB PUTs, and all that time the
event loop, waiting for the GIL, served no connection. Called through ctypes, which lets the
GIL go around a foreign call, the worker thread populates while the loop runs on.

Unmapping holds the GIL too (``mmap.close``, or the mapping freed with its last view): 14-21 ms
for a populated 256 MiB mapping here, on whichever thread lets go of it, often the loop.
:func:`drop_pages` tears the page tables down first, without the GIL (the pages stay in the
file's cache), so the unmap that follows has nothing left to walk.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from collections.abc import Callable

import numpy as np

from s3kv.wire.body import Buffer

PAGE = mmap.PAGESIZE
#: Linux's MADV_POPULATE_READ / MADV_POPULATE_WRITE (5.14+; not in Python 3.11's mmap module)
MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
#: mincore's answer per page -> 1 if resident (its low bit), else 0
_RESIDENT_BIT = bytes(i & 1 for i in range(256))


def page_span(start: int, end: int) -> tuple[int, int]:
    """The pages [first, last) that bytes [start, end) touch."""
    return start // PAGE, -(-end // PAGE)


def _libc_call(name: str, argtypes: list[type]) -> Callable[..., int] | None:
    """``name`` from the process's C library, errno kept (None where it has none)."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_MINCORE = _libc_call("mincore", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p])
_MADVISE = _libc_call("madvise", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])


def address_of(buf: Buffer | mmap.mmap) -> int:
    """Where ``buf``'s first byte is in this process's memory (a mapping's is fixed for its
    lifetime)."""
    return int(np.frombuffer(buf, np.uint8).__array_interface__["data"][0])


def advise(m: mmap.mmap, advice: int, start: int = 0, length: int | None = None) -> None:
    """``m.madvise(advice, start, length)`` without the GIL (``start``: a page boundary).
    Raises OSError as ``madvise`` fails (EINVAL: an advice the kernel does not know). The
    mapping is exported meanwhile, so no other thread unmaps it under the call."""
    length = len(m) - start if length is None else length
    if _MADVISE is None:
        m.madvise(advice, start, length)
        return
    with memoryview(m) as view:
        if _MADVISE(address_of(view) + start, length, advice) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"madvise({advice}) failed: {os.strerror(err)}")


def drop_pages(m: mmap.mmap) -> None:
    """Drop the mapping's page-table entries (``MADV_DONTNEED``: a shared file mapping keeps
    its data, in the file; a later access faults it back in), so that unmapping it later is
    cheap; nothing if the mapping is closed or the kernel refuses."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: closed
        advise(m, mmap.MADV_DONTNEED)


def close_mapping(m: mmap.mmap) -> bool:
    """Close ``m`` (its page tables dropped first, without the GIL) unless a view of it is
    alive: then False, left open (its pages fault back in as the view reads them)."""
    drop_pages(m)
    try:
        m.close()
    except BufferError:
        return False
    return True


def in_memory(m: mmap.mmap, start: int, end: int, base: int | None = None,
              vec: ctypes.Array[ctypes.c_char] | None = None) -> bool:
    """Whether every page of bytes [start, end) of the mapping is in memory (no disk read to
    touch them). False when the system cannot tell. ``base``: the mapping's ``address_of``,
    ``vec``: a buffer to reuse for mincore's answer (each costs a few us to make per call)."""
    if _MINCORE is None or end <= start:
        return False
    first_page, last_page = page_span(start, end)
    first, pages = first_page * PAGE, last_page - first_page
    if base is None:
        base = address_of(m)
    if vec is None or len(vec) < pages:
        vec = ctypes.create_string_buffer(pages)
    if _MINCORE(base + first, end - first, vec) != 0:
        return False
    return ctypes.string_at(vec, pages).translate(_RESIDENT_BIT).find(0) < 0
