"""A PUT's headers indexed once (s3kv/wire/headers.py) and its readers: what each of them
found by walking the raw headers, they find in the index."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from s3kv.gateway.objattrs import from_request
from s3kv.gateway.requests import codec_of
from s3kv.store.codecs import CODEC_HEADERS, CodecSpec
from s3kv.wire.headers import comma_list, index_headers, last_of
from s3kv.wire.sigv4_verify import header_values

_NAMES = st.sampled_from(["Content-Type", "content-type", "X-Amz-Meta-A", "x-amz-meta-a",
                          "x-amz-date", "X-AMZ-DATE", "Host", "x-s3kv-codec", "Expect"])


@given(st.lists(st.tuples(_NAMES, st.text(max_size=5)), max_size=12))
def test_every_value_under_its_lowercase_name_in_order(pairs: list[tuple[str, str]]) -> None:
    heads = index_headers(CIMultiDict(pairs))
    assert set(heads) == {n.lower() for n, _ in pairs}
    for name, values in heads.items():
        assert values == [v for n, v in pairs if n.lower() == name]
    assert index_headers(pairs) == heads  # (name, value) pairs index as a multidict does
    assert last_of(heads, ["host", "absent"]) == dict(
        (n.lower(), v) for n, v in pairs if n.lower() == "host")


def test_repeated_headers_and_the_readers() -> None:
    heads = index_headers([("X-Amz-Meta-Tag", "a"), ("x-amz-meta-tag", "b"),
                           ("Content-Type", "text/plain"), ("content-type", "ignored"),
                           ("X-S3KV-Codec", "none"), ("x-s3kv-codec", "zstd:level=1")])
    attrs = from_request(heads)
    assert attrs.meta == (("tag", "a,b"),)  # repeated metadata joined in order, as S3 does
    assert dict(attrs.headers) == {"Content-Type": "text/plain"}  # the first one
    # a dict of the headers holds the last value: the codec reader sees what it saw before
    assert last_of(heads, CODEC_HEADERS) == {"x-s3kv-codec": "zstd:level=1"}
    assert codec_of(heads, None) == CodecSpec("zstd", level=1)
    assert codec_of(index_headers({"Host": "h"}), CodecSpec("zstd")) == CodecSpec("zstd")


def test_the_index_is_header_values_for_every_name() -> None:
    h: CIMultiDict[str] = CIMultiDict([("Content-MD5", "a"), ("X-Amz-Trailer", "t1"),
                                       ("Host", "h"), ("x-amz-trailer", "t2"),
                                       ("CONTENT-LENGTH", "5")])
    found = index_headers(h)
    assert found == {"content-md5": ["a"], "x-amz-trailer": ["t1", "t2"], "host": ["h"],
                     "content-length": ["5"]}
    for name in ("content-md5", "x-amz-trailer", "content-length", "host", "x-amz-date"):
        assert found.get(name, []) == header_values(h, name)


def test_content_codings_across_repeated_headers() -> None:
    heads = index_headers([("Content-Encoding", " gzip , aws-chunked"), ("content-encoding", ""),
                           ("Content-Encoding", "br")])
    assert comma_list(heads, "content-encoding") == ["gzip", "aws-chunked", "br"]
    assert from_request(heads).headers == (("Content-Encoding", "gzip,br"),)
    assert comma_list(index_headers({"Host": "h"}), "content-encoding") == []
