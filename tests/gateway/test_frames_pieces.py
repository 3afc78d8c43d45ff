"""Batch-put bodies parsed in the pieces they arrived in (s3kv/frames.py's decode_frames): any
split of the same body gives the same blocks, as views of the pieces (nothing joined), and a
malformed body is MalformedFrames however it is split."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3kv.errors import RequestError
from s3kv.frames import BlockSpans, decode_frames, encode_frames
from s3kv.store.layout import checksum, checksum_more, checksum_pieces


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


# ---- BlockSpans: each block's checksum while the body arrives -------------------------------
def _spans_of(pieces: list[bytes]) -> list[int] | None:
    spans = BlockSpans(checksum_more)
    for piece in pieces:
        spans.feed(piece)
    return spans.values


@settings(max_examples=150, deadline=None)
@given(items=st.lists(st.tuples(st.text("abcxyz0123", min_size=1, max_size=6),
                                st.binary(max_size=300)), max_size=6),
       cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_spans_checksum_each_block_as_decode_frames_splits_it(
        items: list[tuple[str, bytes]], cuts: list[int]) -> None:
    body = b"".join(encode_frames(items))
    pieces = _split(body, cuts)
    assert _spans_of(pieces) == [checksum_pieces(parts) for _, parts in decode_frames(pieces)]
    assert _spans_of(pieces) == [checksum(data) for _, data in items]  # empty blocks: 0


@pytest.mark.parametrize("cut", [1, 3, 5, 17])
@pytest.mark.parametrize("body", [
    b"\x05\x00",
    b"\x03\x00\x00\x00{}",
    b"\x02\x00\x00\x00{}",
    b'\x2a\x00\x00\x00{"blocks": [{"key": "a", "length": 9}]}   abc',
    b'\x2a\x00\x00\x00{"blocks": [{"key": "a", "length": 2}]}   abc',
    b'\x2b\x00\x00\x00{"blocks": [{"key": "a", "length": -1}]}   abc',
    b'\x0b\x00\x00\x00not json at',
])
def test_spans_give_up_on_what_decode_frames_refuses(body: bytes, cut: int) -> None:
    assert _spans_of(_split(body, [cut])) is None


def test_spans_refuse_a_head_over_their_limit() -> None:
    body = b"".join(encode_frames([("a" * 100, b"xyz")]))
    spans = BlockSpans(checksum_more, head_limit=50)
    spans.feed(body)
    assert spans.values is None
    assert _spans_of([body]) == [checksum(b"xyz")]
