"""Larger socket reads while a large body arrives (the gateway's request bodies).

asyncio's socket transport reads at most 256 KiB per ``recv`` (its ``max_size``), so a 32 MiB
body arrives in 128 reads, each a turn of the event loop through aiohttp's parser, its payload
stream and the reader above it. :func:`larger_reads` lets a transport read up to
:data:`READ_SIZE` at a time while a body that is wanted arrives, and sets it back to asyncio's
size afterwards: measured in the gateway, 32 MiB PUTs took ~0.74 CPU-s per GiB instead of ~1.0
(docs/performance-log.md, issue 17, session 27). A transport without ``max_size`` (TLS, another
event loop's) is left as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

#: the largest socket read while a wanted body arrives
READ_SIZE = 4 * 1024 * 1024


@contextlib.contextmanager
def larger_reads(transport: asyncio.BaseTransport | None, size: int) -> Iterator[None]:
    """Reads of up to ``size`` bytes (at most READ_SIZE) on ``transport`` for the duration,
    then asyncio's own size (the transport class's) again; smaller sizes change nothing.

    Only for bytes the caller has agreed to take (a body within its memory reservation): a
    read may also take the start of whatever follows on the connection, at most ``size``
    bytes."""
    own = getattr(type(transport), "max_size", None)
    size = min(size, READ_SIZE)
    if not isinstance(own, int) or size <= own:
        yield
        return
    transport.max_size = size  # type: ignore[union-attr]
    try:
        yield
    finally:
        transport.max_size = own  # type: ignore[union-attr]
