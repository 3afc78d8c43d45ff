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
from typing import NamedTuple

import numpy as np

from s3kv.store.index import BlockIndex, Location

#: key bytes gathered at once (with the gather's index: 9 bytes of memory per cell)
CHUNK_CELLS = 1 << 20
#: rounds a page is filled in when entries keep changing under it
MAX_ROUNDS = 8


class Item(NamedTuple):
    """One line of a listing: a key and where its block is, or (``loc`` None) a common
    prefix that keys roll up into (S3's delimiter)."""

    key: bytes
    loc: Location | None


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


def _rolled(keys: np.ndarray, lens: np.ndarray, skip: int, delimiter: bytes
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each key as its listing item, with its length and whether it is a common prefix: cut
    after the first ``delimiter`` at or after byte ``skip`` (the listing prefix's length), as
    S3 rolls keys up; whole without one."""
    width = keys.dtype.itemsize
    span = width - skip - len(delimiter) + 1
    if not delimiter or span < 1 or not len(keys):
        return keys, lens, np.zeros(len(keys), dtype=bool)
    cells = keys.view(np.uint8).reshape(len(keys), width)
    hit = np.ones((len(keys), span), dtype=bool)
    for t, byte in enumerate(delimiter):
        hit &= cells[:, skip + t:skip + t + span] == byte
    hit &= np.arange(skip + len(delimiter), width + 1)[None, :] <= lens[:, None]
    rolled = np.asarray(hit.any(axis=1))
    cut: np.ndarray = np.where(rolled, hit.argmax(axis=1) + skip + len(delimiter), lens)
    items = np.where(np.arange(width)[None, :] < cut[:, None], cells, 0).astype(np.uint8)
    return np.ascontiguousarray(items).view(f"S{width}").ravel(), cut, rolled


async def least_items(index: BlockIndex, ns: int, prefix: bytes, after: bytes, want: int,
                      delimiter: bytes = b"") -> list[tuple[int, bytes, bool]]:
    """The ``want`` least distinct items of namespace ``ns``'s keys that start with ``prefix``
    (each key, or the common prefix it rolls up into) after ``after``, in order: (an entry of
    the item, the item, whether it is a common prefix), as the index held them when each
    chunk was read."""
    entries = index.live_entries(ns)
    if not len(entries) or want < 1:
        return []
    end = _successor(prefix)
    widest = int(index.key_lengths(entries).max())
    step = max(64, CHUNK_CELLS // max(widest, 1))
    best: tuple[np.ndarray, ...] | None = None  # items, lengths, entries, rolled
    for first in range(0, len(entries), step):
        if first:
            await asyncio.sleep(0)  # the loop runs between chunks
        chunk = entries[first:first + step]
        keys, lens = index.fixed_keys(chunk)
        keep = index.in_namespace(chunk, ns)  # still: an entry may have been reused since
        keep &= _above(keys, lens, prefix, True)
        if end is not None:
            keep &= _below(keys, lens, end)
        items, cut, rolled = _rolled(keys, lens, len(prefix), delimiter)
        keep &= _above(items, cut, after, False)
        if best is not None and len(best[0]) == want:  # only what beats the page's last
            keep &= ~_above(items, cut, _key(best[0][-1], int(best[1][-1])), False)
        if not keep.any():
            continue
        parts = [(items[keep], cut[keep], chunk[keep], rolled[keep]), *([best] if best else [])]
        k, n, e, r = (np.concatenate([p[i] for p in parts]) for i in range(4))
        order = np.lexsort((n, k))
        k, n, e, r = k[order], n[order], e[order], r[order]
        first_of_each = np.ones(len(k), dtype=bool)  # keys rolled up into one prefix: once
        first_of_each[1:] = (k[1:] != k[:-1]) | (n[1:] != n[:-1])
        best = tuple(a[first_of_each][:want] for a in (k, n, e, r))
    if best is None:
        return []
    return [(int(e), _key(k, int(n)), bool(r)) for k, n, e, r in zip(*best, strict=True)]


async def page(index: BlockIndex, ns: int, prefix: bytes, after: bytes, limit: int,
               delimiter: bytes = b"") -> tuple[list[Item], bool]:
    """Up to ``limit`` items of namespace ``ns``: its keys that start with ``prefix``, each
    with its location, or with a ``delimiter`` the common prefix it rolls up into, after
    ``after``, in order; and whether more follow."""
    rows: list[Item] = []
    more = False
    for _ in range(MAX_ROUNDS):
        want = limit + 1 - len(rows)
        picked = await least_items(index, ns, prefix, after, want, delimiter)
        for e, item, rolled in picked:
            now = None if rolled else index.entry(e)
            if rolled:
                rows.append(Item(item, None))
            elif now is not None and now[0] == ns and now[1] == item:  # else changed since
                rows.append(Item(item, now[2]))
        more = len(picked) == want
        if not more or len(rows) > limit:
            break
        if rows:
            after = rows[-1].key
    return rows[:limit], more or len(rows) > limit
