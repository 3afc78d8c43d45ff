"""Memory: the gateway refuses to start with settings that let it hold more than the memory
this process may use.

What the settings let a gateway hold (``Settings.held_memory``: request bodies, blocks read, the
DRAM tier, the open segments) is what it grows to under load; past the memory it may use, the
kernel's OOM killer ends it, and with it the blocks of its open segments, acknowledged but not
yet uploaded. The limit is the smaller of the cgroup's (``memory.max`` in cgroup v2, the v1
``memory.limit_in_bytes``: a container's limit) and the machine's memory.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from s3kv.config import Settings
from s3kv.errors import ConfigError
from s3kv.sizes import format_size

#: cgroup files holding this process's memory limit ("max", or a v1 value near 2^63: none)
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"),
                  Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
_NO_LIMIT = 1 << 60


def memory_limit() -> int | None:
    """Bytes of memory this process may use; None where it cannot be told."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < _NO_LIMIT:
            found.append(int(text))
    return min(found) if found else None


def check_memory(settings: Settings, limit: int | None = None) -> None:
    """ConfigError when what the settings let the gateway hold exceeds ``limit`` (by default,
    :func:`memory_limit`)."""
    limit = memory_limit() if limit is None else limit
    held = settings.held_memory
    if limit is None or held <= limit:
        return
    raise ConfigError(
        f"these settings let the gateway hold {format_size(held)}, more than the "
        f"{format_size(limit)} of memory it may use (the machine's, or its container's limit): "
        f"--dram-cache {format_size(settings.dram_cache)} + --max-request-memory "
        f"{format_size(settings.max_request_memory)} + --max-read-memory "
        f"{format_size(settings.max_read_memory)} + --max-open-segments "
        f"{settings.max_open_segments} x --segment-size {format_size(settings.segment_size)}; "
        "lower them (docs/operations.md, sizing)")
