"""The plain lane's head buffers, held by a connection only while it reads or serves a request.

A buffer of ``HEAD_LIMIT`` bytes per connection, made with it, was most of what an idle
connection cost the gateway: 3,000 idle keep-alive connections grew its resident set by 19.7 KiB
each (4.6 KiB now), and the 20,000 its open-files limit lets in would have taken some 400 MiB
that no memory setting bounds. A connection now takes a buffer when its next request's bytes
arrive and gives it back once it has answered and holds nothing more of the
client's; the spares are kept for reuse (at most ``SPARES``), so a busy gateway does not
allocate and zero one per request.
"""

from __future__ import annotations

#: the longest request head the lane reads; a longer one goes to aiohttp (which refuses it)
HEAD_LIMIT = 16 * 1024
#: spare buffers kept for the next requests (their bytes: SPARES x HEAD_LIMIT, 4 MiB)
SPARES = 256
#: what a connection holds between requests: no buffer (len 0)
NO_HEAD = bytearray()

_spares: list[bytearray] = []


def take() -> bytearray:
    """A buffer of ``HEAD_LIMIT`` bytes for a request's head (its contents are stale)."""
    return _spares.pop() if _spares else bytearray(HEAD_LIMIT)


def give(buf: bytearray) -> bytearray:
    """``buf`` given back (no view of it may be used after): :data:`NO_HEAD`, to hold instead."""
    if buf is not NO_HEAD and len(_spares) < SPARES:
        _spares.append(buf)
    return NO_HEAD
