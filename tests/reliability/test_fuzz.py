"""Fuzzing the gateway (hypothesis): malformed S3 and /v1 requests sent raw (random operation
sequences against a model: test_fuzz_stateful.py).

The real gateway process runs on the real moto server. Every malformed request must get a
well-formed answer (an S3 XML <Error>, JSON on /v1; status < 500 except 503 with Retry-After and
the documented 501 NotImplemented) and leave the state consistent: a request that failed
changed nothing, one that succeeded did exactly what it said. CI runs a few hundred examples
(derandomized: the same ones every run); ``--long`` runs thousands.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability.conftest import Report
from tests.support.gateway import (
    GW_ACCESS,
    GW_SECRET,
    SMALL,
    TOKEN,
    Gateway,
    backend_store,
    running_gateway,
)
from tests.support.rawhttp import UNSIGNED, Response, send, sign, signed_send, well_formed
from tests.support.s3server import MotoServer

RID = uuid.uuid4().hex[:6]
FUZZ = f"fuzz-{RID}"
SENTINEL = f"sentinel-{RID}"
SENTINEL_DATA = {f"s{i}": hashlib.sha256(str(i).encode()).digest() * (i + 1) for i in range(8)}


@pytest.fixture(scope="module")
def gw(s3_server: MotoServer) -> Iterator[Gateway]:
    with running_gateway(backend_store(s3_server), [*SMALL, "--dram-cache", "16MiB"]) as g:
        yield g


def _host(g: Gateway) -> str:
    return f"127.0.0.1:{g.port}"


def _signed(g: Gateway, method: str, target: str, body: bytes = b"",
            headers: dict[str, str] | None = None) -> Response:
    return signed_send(g.port, method, target, GW_ACCESS, GW_SECRET, body, headers)


# -- strategies for malformed requests -------------------------------------------------------------

_HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=60)
_NUM = st.one_of(st.integers(-5, 10**7).map(str), st.sampled_from(
    ["", "-", "0x10", "1e3", "99999999999999999999999", " 7", "NaN"]))


def _b64(n: int) -> st.SearchStrategy[str]:
    return st.binary(min_size=n, max_size=n).map(lambda b: base64.b64encode(b).decode())


_HEADERS: dict[str, st.SearchStrategy[str]] = {
    "Range": st.one_of(
        st.builds(lambda a, b: f"bytes={a}-{b}", _NUM, _NUM),
        st.builds(lambda a, b: f"bytes={a}-{b},0-1", _NUM, _NUM),
        st.sampled_from(["bytes=-0", "bytes=-", "bytes=0-", "bytes=5-2", "items=0-1", "bytes",
                         "bytes=--1", "bytes=0--1", "bytes=18446744073709551616-"]),
        _HEADER_TEXT),
    "Content-MD5": st.one_of(_b64(16), _b64(15), _HEADER_TEXT),
    "x-amz-checksum-crc32": st.one_of(_b64(4), _b64(8), _HEADER_TEXT),
    "x-amz-checksum-crc32c": st.one_of(_b64(4), _HEADER_TEXT),
    "x-amz-checksum-sha256": st.one_of(_b64(32), _HEADER_TEXT),
    "x-amz-checksum-crc64nvme": st.one_of(_b64(8), _HEADER_TEXT),
    "x-amz-sdk-checksum-algorithm": st.sampled_from(["CRC32", "crc32", "SHA1", "MD5", ""]),
    "x-amz-trailer": st.sampled_from(["x-amz-checksum-crc32", "x-amz-checksum-foo", "x-bar",
                                      "x-amz-checksum-crc32,x-amz-checksum-sha1"]),
    "x-amz-decoded-content-length": _NUM,
    "Content-Encoding": st.sampled_from(["aws-chunked", "gzip", "aws-chunked,gzip", ""]),
    "x-s3kv-codec": st.one_of(st.sampled_from(
        ["none", "zstd", "zstd:level=99", "zstd:level=-1,shuffle=2", "kvq:bits=3",
         "kvq:bits=4,dtype=float16,head_dim=128", "kvq:bits=9,dtype=int8,head_dim=0", "lz4",
         "zstd:level=", "none:x=1"]), _HEADER_TEXT),
    "x-s3kv-dtype": st.sampled_from(["float16", "bfloat16", "float64", ""]),
    "x-s3kv-head-dim": _NUM,
    "x-s3kv-kvq-bits": _NUM,
    "x-s3kv-durability": st.sampled_from(["sealed", "memory", "SEALED", "fsync", ""]),
    "x-amz-copy-source": _HEADER_TEXT,
    "Expect": st.sampled_from(["100-continue", "200-ok"]),
    "Content-Type": st.sampled_from(["application/xml", "application/x-s3kv-frames",
                                     "text/plain; charset=\u00ff", "multipart/form-data"]),
}

_KEY_CHARS = st.characters(codec="utf-8", exclude_categories=["Cs"])
_KEY = st.one_of(
    st.text(_KEY_CHARS, min_size=0, max_size=20).map(lambda k: quote(k, safe="/")),
    st.binary(max_size=20).map(lambda b: "".join(f"%{x:02X}" for x in b)),
    st.sampled_from(["..", "a/../b", "%2e%2e", "a//b", "%00", "k" * 1025, ".", "a%2Fb"]),
    st.text(st.sampled_from("ab/.%2F"), min_size=1, max_size=12),
)
_BUCKET = st.one_of(st.just(FUZZ), st.text(st.sampled_from("ab-.Z0%_"), min_size=0, max_size=8),
                    st.just("v1"), st.just("metrics"))
_QUERY = st.lists(st.tuples(st.sampled_from(
    ["uploads", "uploadId", "partNumber", "delete", "list-type", "prefix", "delimiter",
     "max-keys", "continuation-token", "start-after", "encoding-type", "location", "acl",
     "versioning", "x-id", "X-Amz-Algorithm", "X-Amz-Signature", "X-Amz-Credential",
     "X-Amz-Expires", "X-Amz-Date"]), st.one_of(_NUM, _HEADER_TEXT)), max_size=3).map(
    lambda qs: "&".join(f"{k}={quote(v, safe='')}" for k, v in qs))


def _xml_escape(t: str) -> str:
    return t.replace("&", "&amp;").replace("<", "&lt;")


_XML_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
_PART = st.builds(
    lambda n, e, tag: f"<{tag}><PartNumber>{n}</PartNumber><ETag>{_xml_escape(e)}</ETag>"
                      f"</{tag}>", _NUM, _XML_TEXT, st.sampled_from(["Part", "part", "Parts"]))
_OBJ = st.builds(lambda k, v: f"<Object><Key>{_xml_escape(k)}</Key>{v}</Object>",
                 _XML_TEXT, st.sampled_from(["", "<VersionId>1</VersionId>"]))
_XML_BODY = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda objs, q: f"<Delete>{q}{''.join(objs)}</Delete>",
              st.lists(_OBJ, max_size=6), st.sampled_from(["", "<Quiet>true</Quiet>",
                                                           "<Quiet>maybe</Quiet>"])),
    st.builds(lambda parts: "<CompleteMultipartUpload>" + "".join(parts) +
              "</CompleteMultipartUpload>", st.lists(_PART, max_size=5)),
    st.builds(lambda loc: "<CreateBucketConfiguration><LocationConstraint>" + _xml_escape(loc) +
              "</LocationConstraint></CreateBucketConfiguration>", _XML_TEXT),
    st.integers(1, 3000).map(lambda n: "<Delete>" + "<Object>" * n + "</Object>" * n +
                             "</Delete>"),
    st.just('<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;'
            '&a;&a;">]><Delete><Object><Key>&b;</Key></Object></Delete>'),
    st.just('<!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]><Delete><Object><Key>&x;'
            '</Key></Object></Delete>'),
    st.integers(1001, 1500).map(lambda n: "<Delete>" + "<Object><Key>k</Key></Object>" * n +
                                "</Delete>"),
).map(lambda b: b if isinstance(b, bytes) else b.encode())


def _aws_chunked(chunks: list[bytes], signed: bool, trailer: bool) -> bytes:
    sig = ";chunk-signature=" + "0" * 64 if signed else ""
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(c), sig.encode(), c) for c in chunks)
    out += b"0" + sig.encode() + b"\r\n"
    if trailer:
        out += b"x-amz-checksum-crc32:AAAAAA==\r\n"
        if signed:
            out += b"x-amz-trailer-signature:" + b"0" * 64 + b"\r\n"
    return out + b"\r\n"


@st.composite
def _chunked_body(draw: st.DrawFn) -> tuple[bytes, dict[str, str]]:
    chunks = draw(st.lists(st.binary(min_size=1, max_size=64), max_size=4))
    signed, trailer = draw(st.booleans()), draw(st.booleans())
    body = bytearray(_aws_chunked(chunks, signed, trailer))
    corruption = draw(st.sampled_from(["none", "truncate", "flip", "insert", "size", "crlf"]))
    if corruption == "truncate":
        del body[draw(st.integers(0, len(body) - 1)):]
    elif corruption == "flip":
        i = draw(st.integers(0, len(body) - 1))
        body[i] ^= 1 << draw(st.integers(0, 7))
    elif corruption == "insert":
        i = draw(st.integers(0, len(body)))
        body[i:i] = draw(st.binary(min_size=1, max_size=8))
    elif corruption == "size":
        body[0:1] = draw(st.sampled_from([b"zz", b"-1", b"ffffffffffffffff", b" ", b""]))
    elif corruption == "crlf":
        i = bytes(body).find(b"\r\n")
        del body[i:i + 2]
    mode = ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD" if signed else "STREAMING-UNSIGNED-PAYLOAD") + \
        ("-TRAILER" if trailer else "")
    if mode == "STREAMING-UNSIGNED-PAYLOAD":
        mode = draw(st.sampled_from([mode, "STREAMING-UNSIGNED-PAYLOAD-TRAILER"]))
    decoded = sum(len(c) for c in chunks)
    headers = {"Content-Encoding": "aws-chunked", "x-amz-content-sha256": mode,
               "x-amz-decoded-content-length": str(draw(st.sampled_from(
                   [decoded, decoded + 1, max(0, decoded - 1), 0])))}
    if trailer:
        headers["x-amz-trailer"] = "x-amz-checksum-crc32"
    return bytes(body), headers


@st.composite
def malformed_request(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["s3", "s3", "s3", "chunked", "native", "garbage", "http"]))
    method = draw(st.sampled_from(["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"]))
    bucket, key, query = draw(_BUCKET), draw(_KEY), draw(_QUERY)
    target = "/" + bucket + (("/" + key) if draw(st.booleans()) else "")
    if query:
        target += "?" + query
    headers = {n: draw(s) for n, s in _HEADERS.items() if draw(st.integers(0, 9)) == 0}
    body = draw(st.one_of(st.binary(max_size=300), _XML_BODY))
    req: dict[str, Any] = {"kind": kind, "method": method, "target": target,
                           "headers": headers, "body": body, "native": False}
    if kind == "chunked":
        body, ch = draw(_chunked_body())
        req.update(method="PUT", target=f"/{FUZZ}/{key or 'k'}", body=body,
                   headers={**headers, **ch})
    elif kind == "native":
        ns = draw(st.sampled_from([FUZZ, "nope-" + RID, "v1", "a"]))
        ep = draw(st.sampled_from(["lookup", "batch-get", "batch-put", "flush", "stats"]))
        req["target"] = f"/v1/{ep}" if ep in ("flush", "stats") else f"/v1/{ns}/{ep}"
        req["method"] = draw(st.sampled_from(["POST", "POST", "GET", "PUT"]))
        req["native"] = True
        keys = draw(st.lists(st.one_of(_XML_TEXT, st.integers(), st.none()), max_size=5))
        frames_head = json.dumps({"blocks": [{"key": k, "length": draw(st.integers(-2, 40))}
                                             for k in keys]}).encode()
        req["body"] = draw(st.sampled_from([
            json.dumps({"keys": keys}).encode(), json.dumps(keys).encode(), body,
            struct.pack("<I", len(frames_head)) + frames_head + draw(st.binary(max_size=80)),
            struct.pack("<I", draw(st.integers(0, 2**32 - 1))) + frames_head,
            json.dumps({"keys": ["k"] * 5000}).encode(),
        ]))
        req["bearer"] = draw(st.booleans())
    elif kind == "garbage":
        # a non-empty first line: HTTP servers skip empty lines before a request line
        req["raw_head"] = b"G" + draw(st.binary(max_size=200)).replace(b"\r\n\r\n", b"") + \
            b"\r\n\r\n"
    elif kind == "http":  # HTTP-level framing: Transfer-Encoding chunked, broken
        size_line = draw(st.sampled_from([b"5", b"zz", b"5;ext=\x01", b"-5", b"5 5", b"",
                                          b"ffffffffffffffffffff"]))
        req.update(method="PUT", target=f"/{FUZZ}/{key or 'k'}",
                   body=size_line + b"\r\nhello\r\n0\r\n\r\n",
                   headers={**headers, "Transfer-Encoding": draw(st.sampled_from(
                       ["chunked", "chunked, gzip", "identity", "chunked,chunked"]))})
    req["auth"] = draw(st.sampled_from(["signed", "signed", "signed", "bad-sig", "unsigned",
                                        "garbage"]))
    return req


def _send_malformed(g: Gateway, req: dict[str, Any]) -> Response:
    method, target, body = req["method"], req["target"], req["body"]
    headers = dict(req["headers"])
    if "raw_head" in req:
        return send(g.port, method, target, {}, raw_head=req["raw_head"], timeout=10)
    if req.get("bearer"):
        headers["Authorization"] = f"Bearer {TOKEN}"
    elif req["auth"] in ("signed", "bad-sig"):
        payload = headers.pop("x-amz-content-sha256", None)
        if payload is None and req["kind"] != "chunked":
            payload = UNSIGNED if len(body) % 2 else None
        headers = sign(method, target, _host(g), GW_ACCESS, GW_SECRET, body=body,
                       headers=headers, payload=payload)
        if req["auth"] == "bad-sig":
            headers["Authorization"] = headers["Authorization"][:-1] + "x"
    elif req["auth"] == "garbage":
        headers["Authorization"] = "AWS4-HMAC-SHA256 Credential=" + "/" * 5 + ", Signature=z"
    framing = {k.lower() for k in headers}
    te = "transfer-encoding" in framing
    return send(g.port, method, target, headers, body, content_length=not te, timeout=10)


def _decoded(target: str) -> tuple[str, str] | None:
    """(bucket, key) the gateway reads from a path-style target, or None if it cannot."""
    path = target.split("?")[0]
    try:
        path = unquote(path, errors="strict")
    except UnicodeDecodeError:
        return None
    bucket, _, key = path[1:].partition("/")
    return bucket, key


class FuzzModel:
    """What the fuzz bucket must hold: keys written by requests that succeeded."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.unknown: set[str] = set()  # touched by an operation whose effect we do not model
        self.bucket = True  # the fuzz bucket exists (a fuzzed DELETE /bucket may remove it)

    def apply(self, req: dict[str, Any], resp: Response) -> None:
        dec = _decoded(req["target"])
        if dec is None or dec[0] != FUZZ or req.get("native"):
            if req.get("native") and FUZZ in req["target"] and resp.status == 200:
                self.unknown.add("*")  # a batch-put may have written keys
            return
        key = dec[1]
        query = req["target"].partition("?")[2]
        if not key and req["method"] in ("DELETE", "PUT") and resp.status < 300:
            if req["method"] == "DELETE":  # DeleteBucket: only an empty bucket
                assert "*" in self.unknown or not self.objects, ("deleted a non-empty bucket",
                                                                 self.objects)
                self.bucket, self.objects = False, {}
                self.unknown.discard("*")
            elif req["method"] == "PUT":
                self.bucket = True
            return
        if resp.status >= 300 or not key:
            if req["method"] == "POST" and "delete" in query and resp.status == 200:
                self.unknown.add("*")
            return
        if req["method"] == "PUT" and not query and "transfer-encoding" not in \
                {k.lower() for k in req["headers"]} and req["kind"] == "s3":
            self.objects[key] = req["body"]
            self.unknown.discard(key)
        elif req["method"] in ("PUT", "POST", "DELETE"):
            self.unknown.add(key)
            self.objects.pop(key, None)


def _seed_sentinel(g: Gateway) -> None:
    for bucket in (FUZZ, SENTINEL):
        assert _signed(g, "PUT", f"/{bucket}").status in (200, 409)
    for k, v in SENTINEL_DATA.items():
        assert _signed(g, "PUT", f"/{SENTINEL}/{k}", v).status == 200


def _check_consistent(g: Gateway, model: FuzzModel) -> tuple[int, int]:
    """Sentinel bytes intact, the fuzz bucket's listing readable and as modelled.
    Returns (requests sent, wrong bytes)."""
    n = wrong = 0
    for k, v in SENTINEL_DATA.items():
        r = _signed(g, "GET", f"/{SENTINEL}/{k}")
        n += 1
        wrong += r.body != v
    r = _signed(g, "GET", f"/{FUZZ}?list-type=2&encoding-type=url")
    n += 1
    if not model.bucket:
        assert (r.status, r.code) == (404, "NoSuchBucket"), r
        return n, wrong
    assert r.status == 200, r
    listed = {unquote(x.split("</Key>")[0]): int(x.split("<Size>")[1].split("<")[0])
              for x in r.body.decode().split("<Key>")[1:]}
    for key, size in listed.items():
        got = _signed(g, "GET", f"/{FUZZ}/{quote(key, safe='/')}")
        n += 1
        assert got.status == 200 and len(got.body) == size, (key, got)
    if "*" not in model.unknown:
        for key, data in model.objects.items():
            got = _signed(g, "GET", f"/{FUZZ}/{quote(key, safe='/')}")
            n += 1
            wrong += got.body != data
        assert set(model.objects) <= set(listed), (set(model.objects) - set(listed))
    return n, wrong


def test_fuzz_malformed_requests(gw: Gateway, long_run: bool,
                                 reliability_report: Report) -> None:
    _seed_sentinel(gw)
    model = FuzzModel()
    sent = [0]
    kinds: dict[str, int] = {}

    @settings(max_examples=20000 if long_run else 1000, deadline=None, derandomize=not long_run,
              database=None, suppress_health_check=list(HealthCheck))
    @given(req=malformed_request())
    def fuzz(req: dict[str, Any]) -> None:
        resp = _send_malformed(gw, req)
        sent[0] += 1
        kinds[req["kind"]] = kinds.get(req["kind"], 0) + 1
        if req["kind"] in ("garbage", "http"):
            # HTTP-level garbage may be answered by aiohttp's own parser (plain text 400)
            assert resp.status < 500 or well_formed(resp) is None, (req, resp)
        else:
            problem = well_formed(resp, native=req["target"].startswith("/v1/"))
            assert problem is None, (req, problem)
        model.apply(req, resp)

    fuzz()
    with urllib.request.urlopen(gw.endpoint + "/healthz", timeout=5) as r:
        assert r.status == 200
    n, wrong = _check_consistent(gw, model)
    assert wrong == 0
    reliability_report.record(
        "fuzz", "malformed S3 and /v1 requests (headers, ranges, XML, aws-chunked and HTTP "
        "chunked framing, signatures, keys, garbage)", faults=sent[0], requests=sent[0] + n,
        wrong_bytes=wrong, peak_rss_mib=gw.rss_bytes() / 2**20,
        note=", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
