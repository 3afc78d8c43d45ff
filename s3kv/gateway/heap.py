"""Keep freed memory for reuse instead of handing it back to the kernel (glibc's malloc).

The gateway's memory turns over in large pieces: every request body arrives as buffers of up
to 256 KiB (one per socket read), an open segment keeps them until its upload is done (up to
``segment_size``), then frees them all, and the next segment's bodies arrive. glibc serves
buffers over its mmap threshold (128 KiB to start with) with ``mmap`` and gives them back with
``munmap``, and trims the top of its heap once more than twice that is free: so the next
buffers are new pages, each faulted in and zeroed by the kernel. On the machines measured here
a page fault costs 1.6-9.5 us: a fresh 256 KiB buffer took 64 faults and ~100-115 us to fill,
a reused one ~11 us (tens of thousands per second at 1 GiB/s), and a batch put of 256 KiB blocks
took 4-10 faults per block with the resident set swinging by 200 MiB every second.

:func:`keep_freed_memory` raises both thresholds (``mallopt``): buffers up to 32 MiB (glibc's
largest mmap threshold) come from the heap, and the heap is trimmed only above ``limit``, the
memory the settings already allow the gateway (request bodies, open segments, the DRAM tier).
The resident set then stays at its high-water mark instead of swinging. (glibc applies the
trim threshold per arena: the event loop's holds almost every buffer; a worker thread that
allocates, a codec's, keeps its own.) A C library without ``mallopt`` (musl) is left as it is.
"""

from __future__ import annotations

import ctypes

from s3kv.log import get_logger

log = get_logger(__name__)

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: glibc refuses mmap thresholds above this (HEAP_MAX_SIZE / 2 on 64-bit)
MAX_MMAP_THRESHOLD = 32 * 1024 * 1024


def keep_freed_memory(limit: int) -> bool:
    """Serve buffers up to 32 MiB from the heap and trim it only above ``limit`` bytes; False
    if this C library has no ``mallopt`` (or refuses the values)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's C library, as filemaps.py finds it
    except (OSError, AttributeError):
        log.info("gateway.heap_untuned", detail="the C library has no mallopt")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    trim = min(max(limit, MAX_MMAP_THRESHOLD), 2**31 - 1)
    ok = bool(mallopt(M_MMAP_THRESHOLD, MAX_MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, trim))
    log.info("gateway.heap_tuned" if ok else "gateway.heap_untuned",
             mmap_threshold=MAX_MMAP_THRESHOLD, trim_threshold=trim)
    return ok
