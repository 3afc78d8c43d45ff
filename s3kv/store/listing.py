"""A namespace's keys in order, a page at a time, without holding the event loop.

The index (index.py) is a hash table: it keeps no order. A page of a listing (S3's ListObjects,
the native list) is the ``limit`` least keys past a cursor. Sorting every key of the namespace
in Python for each page held the event loop 2.5 s per page at a million keys (every request of
the gateway waited, ``/readyz`` too) and paging through them took a full sort per page. Here
the namespace's live entries are taken as numbers, and their keys gathered in chunks of at most
``CHUNK_CELLS`` bytes into fixed-width numpy arrays that are compared and sorted in C, keeping
only the page's worth of least keys; between chunks the loop runs. Only a page's keys become
Python bytes.

The order is the keys' exact byte order: numpy's ``S`` compares as the bytes do except that it
ignores trailing NUL bytes, so keys equal under it are ordered by length (the shorter is a
prefix of the longer). An entry that changed while its chunk waited (freed, or reused for
another key) is dropped when the page is read out, and the page is filled from where it
stopped: a key written or deleted during a listing may or may not be in it, as with S3.
"""

from __future__ import annotations

import asyncio

import numpy as np

from s3kv.store.index import BlockIndex, Location

#: key bytes gathered at once (with the gather's index: 9 bytes of memory per cell)
CHUNK_CELLS = 1 << 20
#: rounds a page is filled in when entries keep changing under it
MAX_ROUNDS = 8


def _successor(prefix: bytes) -> bytes | None:
    """The least byte string above every key that starts with ``prefix`` (None: none is)."""
    stem = prefix.rstrip(b"\xff")
    return stem[:-1] + bytes([stem[-1] + 1]) if stem else None


def _above(keys: np.ndarray, lens: np.ndarray, bound: bytes, inclusive: bool) -> np.ndarray:
    """Which keys are after ``bound`` (or equal to it, when ``inclusive``), exactly."""
    b = np.bytes_(bound)
    ties: np.ndarray = (keys == b) & (lens >= len(bound) if inclusive else lens > len(bound))
    out: np.ndarray = (keys > b) | ties
    return out


def _below(keys: np.ndarray, lens: np.ndarray, bound: bytes) -> np.ndarray:
    """Which keys are before ``bound``, exactly."""
    b = np.bytes_(bound)
    ties: np.ndarray = (keys == b) & (lens < len(bound))
    out: np.ndarray = (keys < b) | ties
    return out


def _key(raw: np.bytes_, length: int) -> bytes:
    """A key from its ``S`` form (which lost its trailing NULs) and length."""
    return bytes(raw).ljust(length, b"\0")


async def least_keys(index: BlockIndex, ns: int, start: bytes, inclusive: bool,
                     end: bytes | None, want: int) -> list[tuple[int, bytes]]:
    """The ``want`` least (entry, key) of namespace ``ns`` after ``start`` (or at it, when
    ``inclusive``) and before ``end`` (None: no end), in order, as the index held them when
    each chunk was read."""
    entries = index.live_entries(ns)
    if not len(entries) or want < 1:
        return []
    widest = int(index.key_lengths(entries).max())
    step = max(64, CHUNK_CELLS // max(widest, 1))
    best: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # keys, lengths, entries
    for first in range(0, len(entries), step):
        if first:
            await asyncio.sleep(0)  # the loop runs between chunks
        chunk = entries[first:first + step]
        keys, lens = index.fixed_keys(chunk)
        keep = _above(keys, lens, start, inclusive)
        if end is not None:
            keep &= _below(keys, lens, end)
        if best is not None and len(best[0]) == want:  # only what beats the page's last
            keep &= _below(keys, lens, _key(best[0][-1], int(best[1][-1])))
        if not keep.any():
            continue
        parts = [(keys[keep], lens[keep], chunk[keep])]
        if best is not None:
            parts.append(best)
        k, n, e = (np.concatenate([p[i] for p in parts]) for i in range(3))
        order = np.lexsort((n, k))[:want]
        best = (k[order], n[order], e[order])
    if best is None:
        return []
    return [(int(e), _key(k, int(n))) for k, n, e in zip(*best, strict=True)]


async def page(index: BlockIndex, ns: int, prefix: bytes, after: bytes, limit: int
               ) -> tuple[list[tuple[bytes, Location]], bool]:
    """Up to ``limit`` (key, location) of namespace ``ns`` that start with ``prefix`` and come
    after ``after``, in key order, and whether more follow."""
    start, inclusive = (prefix, True) if after < prefix else (after, False)
    end = _successor(prefix)
    rows: list[tuple[bytes, Location]] = []
    more = False
    for _ in range(MAX_ROUNDS):
        want = limit + 1 - len(rows)
        picked = await least_keys(index, ns, start, inclusive, end, want)
        for e, key in picked:
            now = index.entry(e)
            if now is not None and now[0] == ns and now[1] == key:  # else changed since
                rows.append((key, now[2]))
        more = len(picked) == want
        if not more or len(rows) > limit:
            break
        if rows:
            start, inclusive = rows[-1][0], False
    return rows[:limit], more or len(rows) > limit
