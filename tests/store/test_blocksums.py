"""Block checksums worked out as a landing's bytes arrive (s3kv/store/blocksums.py): fed in
pieces of any size, each block's checksum is layout.checksum of its bytes; bytes that do not
add up are the error of the values, asked for once the body is in, not of the feed (called
from a protocol's callback)."""

from __future__ import annotations

import os
import random

import pytest

from s3kv.sizes import KiB, MiB
from s3kv.store import layout
from s3kv.store.blocksums import BlockSums

SIZES = [0, 300 * KiB + 7, 0, 1, 64 * KiB, 0, 2 * MiB - 3, 0]


def _pieces(body: memoryview, rng: random.Random) -> list[memoryview]:
    """``body`` cut at random places (pieces that straddle blocks, split them, or are tiny)."""
    pieces, at = [], 0
    while at < len(body):
        n = rng.choice([1, 13, 4 * KiB, 300 * KiB, 1 * MiB, len(body)])
        pieces.append(body[at:at + n])
        at += n
    return pieces


def test_block_sums_follow_the_blocks_across_any_pieces() -> None:
    blobs = [os.urandom(n) for n in SIZES]
    body = memoryview(b"".join(blobs))
    rng = random.Random(7)
    for _ in range(20):
        sums = BlockSums(SIZES)
        for piece in _pieces(body, rng):
            sums.feed(piece)
        assert sums.values() == [layout.checksum(b) for b in blobs]
    short = BlockSums(SIZES)
    short.feed(body[:-1])
    with pytest.raises(ValueError, match="still to come"):
        short.values()
    over = BlockSums([3])  # fed from a protocol's callback: the error is values', not feed's
    over.feed(memoryview(b"abcd"))
    over.feed(memoryview(b"e"))
    with pytest.raises(ValueError, match="more bytes"):
        over.values()
    assert BlockSums([0, 0]).values() == [0, 0] == [layout.checksum(b"")] * 2
