"""The compact index against a plain dict model, through growth, deletes, reuse and compaction."""

from __future__ import annotations

import random
import zlib

from hypothesis import given
from hypothesis import strategies as st

from s3kv.store import layout
from s3kv.store.index import BlockIndex, Location


def loc(i: int, seg: int) -> Location:
    return Location(seg, i * 4096, 100 + i, 100 + i, i * 7 % 2**32, i % 3, float(i))


def test_random_operations_match_a_dict() -> None:
    rng = random.Random(1234)
    idx = BlockIndex(capacity=8)
    model: dict[tuple[int, bytes], Location] = {}
    keys = [(rng.randrange(3), rng.randbytes(rng.randrange(1, 80))) for _ in range(3000)]
    for step in range(40_000):
        ns, key = rng.choice(keys)
        op = rng.random()
        if op < 0.55:
            new = loc(step, step // 500)
            assert idx.put(ns, key, new) == model.get((ns, key))
            model[(ns, key)] = new
        elif op < 0.85:
            assert idx.remove(ns, key) == model.pop((ns, key), None)
        else:
            assert idx.get(ns, key) == model.get((ns, key))
        if step % 5000 == 0:
            seg = rng.randrange(step // 500 + 1)
            gone = [k for k, v in model.items() if v.segment == seg]
            assert idx.drop_segment(seg) == len(gone)
            for k in gone:
                del model[k]
    assert len(idx) == len(model)
    for (ns, key), value in model.items():
        assert idx.get(ns, key) == value
    for ns in range(3):
        entries = [idx.entry(int(e)) for e in idx.live_entries(ns)]
        listed = {got[1]: got[2] for got in entries if got is not None and got[0] == ns}
        assert len(listed) == len(entries)
        assert listed == {k: v for (n, k), v in model.items() if n == ns}
        assert idx.count_namespace(ns) == len(listed)


def test_hot_flag_and_segment_entries() -> None:
    idx = BlockIndex()
    for i in range(10):
        idx.put(1, f"k{i}".encode(), loc(i, 5 if i < 6 else 6))
    idx.touch(1, b"k2")
    entries = {k: hot for _, k, _, hot in idx.segment_entries(5)}
    assert set(entries) == {f"k{i}".encode() for i in range(6)}
    assert entries[b"k2"] and not entries[b"k3"]
    idx.put(1, b"k2", loc(2, 5))  # a rewrite is cold again
    assert not {k: h for _, k, _, h in idx.segment_entries(5)}[b"k2"]


@given(st.binary(max_size=20_000), st.integers(0, 64))
def test_block_checksum_is_zlib_crc32(data: bytes, cut: int) -> None:
    """The format says CRC-32 as zlib.crc32 computes it (docs/format.md); the checksum comes
    from zlib-ng for speed, and must give the same values on every buffer type."""
    want = zlib.crc32(data) & 0xFFFFFFFF
    assert layout.checksum(data) == want
    assert layout.checksum(bytearray(data)) == want
    assert layout.checksum(memoryview(data)) == want
    assert layout.checksum(memoryview(data)[cut:]) == zlib.crc32(data[cut:]) & 0xFFFFFFFF
