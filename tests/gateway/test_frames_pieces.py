"""Batch-put bodies parsed in the pieces they arrived in (s3kv/frames.py's decode_frames): any
split of the same body gives the same blocks, as views of the pieces (nothing joined), and a
malformed body is MalformedFrames however it is split."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3kv.errors import RequestError
from s3kv.frames import decode_frames, encode_frames


def _split(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(body) + 1) for c in cuts})
    edges = [0, *points, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(edges)]


BLOCKS = st.lists(st.tuples(st.text("abcxyz0123", min_size=1, max_size=6),
                            st.binary(max_size=300)), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(items=BLOCKS, cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_any_split_gives_the_same_blocks(items: list[tuple[str, bytes]], cuts: list[int]) -> None:
    body = b"".join(encode_frames(items))
    got = decode_frames(_split(body, cuts))
    assert [(k, b"".join(parts)) for k, parts in got] == items
    assert all(isinstance(p, memoryview) for _, parts in got for p in parts)


@pytest.mark.parametrize("cut", [1, 3, 5, 17])
@pytest.mark.parametrize("body", [
    b"\x05\x00",                                                   # short length prefix
    b"\x03\x00\x00\x00{}",                                         # head shorter than said
    b"\x02\x00\x00\x00{}",                                         # no "blocks"
    b'\x2a\x00\x00\x00{"blocks": [{"key": "a", "length": 9}]}   abc',  # block past the end
    b'\x2a\x00\x00\x00{"blocks": [{"key": "a", "length": 2}]}   abc',  # trailing bytes
    b'\x2b\x00\x00\x00{"blocks": [{"key": "a", "length": -1}]}   abc',  # negative length
])
def test_malformed_bodies_are_refused_however_split(body: bytes, cut: int) -> None:
    with pytest.raises(RequestError) as info:
        decode_frames(_split(body, [cut]))
    assert info.value.code == "MalformedFrames"
