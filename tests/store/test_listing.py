"""A namespace's keys in order, a page at a time, without holding the event loop
(s3kv/store/listing.py), against a sorted list of the same keys."""

from __future__ import annotations

import asyncio
import random

import pytest

from s3kv.store import listing
from s3kv.store.index import BlockIndex, Location

LOC = Location(1, 0, 1, 1, 0, 0, 0.0)


def expected(keys: set[bytes], prefix: bytes, after: bytes, limit: int, delimiter: bytes = b""
             ) -> tuple[list[tuple[bytes, bool]], bool]:
    """S3's listing, the plain way: keys with the prefix, each rolled up through the first
    delimiter after the prefix, distinct, after ``after``, in order."""
    items = set()
    for k in keys:
        if k.startswith(prefix):
            cut = k.find(delimiter, len(prefix)) if delimiter else -1
            items.add((k[:cut + len(delimiter)], True) if cut >= 0 else (k, False))
    ordered = sorted(i for i in items if i[0] > after)
    return ordered[:limit], len(ordered) > limit


async def test_pages_match_the_sorted_keys_with_nul_and_ff_bytes() -> None:
    """Keys that differ only in trailing NULs (which numpy's fixed-width bytes ignore), 0xff
    bytes (no successor of a prefix of them), other namespaces, freed entries, and
    delimiters of one byte and of two (keys rolled up into common prefixes)."""
    rnd = random.Random(7)
    alphabet = [b"a", b"b", b"\x00", b"\xff", b"ab", b"a\x00"]
    for _ in range(300):
        index, keys = BlockIndex(16), set()
        for _ in range(rnd.randint(0, 60)):
            key = b"".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 6)))
            keys.add(key)
            index.put(1, key, LOC)
            if rnd.random() < 0.2:
                index.put(2, key + b"z", LOC)
        for key in [k for k in keys if rnd.random() < 0.2]:
            index.remove(1, key)
            keys.discard(key)
        prefix = rnd.choice([b"", b"a", b"\xff", b"a\x00", b"b"])
        after = rnd.choice([b"", b"a", b"ab", b"b\x00", b"\xff\xff", *sorted(keys)[:3]])
        limit = rnd.randint(1, 10)
        delimiter = rnd.choice([b"", b"", b"b", b"\x00", b"ab", b"\xff\xff"])
        rows, more = await listing.page(index, 1, prefix, after, limit, delimiter)
        assert ([(k, loc is None) for k, loc in rows], more) == \
            expected(keys, prefix, after, limit, delimiter), (prefix, after, limit, delimiter)
        assert all(loc == LOC for _, loc in rows if loc is not None)


async def test_a_long_listing_lets_the_loop_run_and_sees_keys_that_change_under_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of a few keys: the loop runs between them, and keys deleted and written while a
    page is read are in it or not, but every key there throughout is, once and in order."""
    monkeypatch.setattr(listing, "CHUNK_CELLS", 64)
    index = BlockIndex(16)
    keys = {b"key-%05d" % i for i in range(0, 4000, 2)}
    for key in keys:
        index.put(1, key, LOC)
    turns = 0
    changed: set[bytes] = set()

    async def churn() -> None:
        nonlocal turns
        rnd = random.Random(3)
        while True:
            turns += 1
            key = b"key-%05d" % rnd.randrange(4000)
            changed.add(key)
            if index.remove(1, key) is None:
                index.put(1, key, LOC)
            await asyncio.sleep(0)

    task = asyncio.create_task(churn())
    try:
        seen: list[bytes] = []
        after, more = b"", True
        while more:
            rows, more = await listing.page(index, 1, b"", after, 500)
            seen += [k for k, _ in rows]
            after = seen[-1]
    finally:
        task.cancel()
    assert turns > 100  # the loop ran while the pages were read
    assert seen == sorted(set(seen))
    assert keys - changed <= set(seen) <= keys | changed


async def test_a_page_filled_past_entries_freed_while_it_was_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidates freed before the page is read out are dropped and the page is filled from
    where it stopped, so a full page still says more follow."""
    index = BlockIndex(16)
    for i in range(20):
        index.put(1, b"k%02d" % i, LOC)
    least = listing.least_items
    calls = 0

    async def then_free(*args: object) -> list[tuple[int, bytes, bool]]:
        nonlocal calls
        picked = await least(*args)  # type: ignore[arg-type]
        calls += 1
        if calls == 1:
            for _, key, _ in picked[:3]:
                index.remove(1, key)
        return picked

    monkeypatch.setattr(listing, "least_items", then_free)
    rows, more = await listing.page(index, 1, b"", b"", 5)
    assert [k for k, _ in rows] == [b"k%02d" % i for i in range(3, 8)] and more
    assert calls == 2


async def test_a_page_of_common_prefixes_is_one_pass_however_many_keys_each_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys rolled up in the pass itself: a page of 50 prefixes of 400 keys each reads the
    namespace once, not once per prefix."""
    index = BlockIndex(16)
    for p in range(50):
        for k in range(400):
            index.put(1, b"p%02d/%04d" % (p, k), LOC)
    index.put(1, b"top", LOC)
    passes = 0
    live = index.live_entries

    def counted(ns: int) -> object:
        nonlocal passes
        passes += 1
        return live(ns)

    monkeypatch.setattr(index, "live_entries", counted)
    rows, more = await listing.page(index, 1, b"", b"", 1000, b"/")
    assert [k for k, _ in rows] == [b"p%02d/" % p for p in range(50)] + [b"top"]
    assert not more and passes == 1
    rows, more = await listing.page(index, 1, b"", b"p07/", 3, b"/")  # after a prefix: past it
    assert [k for k, _ in rows] == [b"p08/", b"p09/", b"p10/"] and more


async def test_entries_another_namespace_takes_over_mid_listing_do_not_show(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry freed and reused by another namespace's key while a listing reads its chunks
    is not rolled up into this namespace's common prefixes (one tenant's keys never show in
    another's listing)."""
    monkeypatch.setattr(listing, "CHUNK_CELLS", 64)
    index = BlockIndex(16)
    mine = [b"mine/%04d" % i for i in range(2000)]
    for key in mine:
        index.put(1, key, LOC)

    async def take_over() -> None:
        for i, key in enumerate(mine[::-1]):  # freed from the end, whose chunks come last
            index.remove(1, key)
            index.put(2, b"theirs/%04d" % i, LOC)  # the freed entry, reused
            await asyncio.sleep(0)

    task = asyncio.create_task(take_over())
    try:
        for _ in range(20):
            rows, _ = await listing.page(index, 1, b"", b"", 1000, b"/")
            assert {k for k, _ in rows} <= {b"mine/"}
    finally:
        task.cancel()
