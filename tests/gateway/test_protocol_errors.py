"""Malformed requests over raw sockets get S3 XML 4xx errors (also those aiohttp's HTTP parser
refuses before any middleware runs), and a client hanging up mid-GET is an info line, not a 500.
"""

from __future__ import annotations

import json
import os
import socket
import time
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from tests.gateway.conftest import GW_ACCESS, GW_SECRET, Gateway
from tests.gateway.test_gateway_ops import scrape, value
from tests.support import rawhttp


def _host(gateway: Gateway) -> str:
    return f"127.0.0.1:{gateway.port}"


def _xml_error(r: rawhttp.Response) -> str:
    assert r.headers.get("content-type", "").startswith("application/xml"), (r.status, r.body)
    assert r.headers.get("x-amz-request-id")
    root = ET.fromstring(r.body)
    assert root.tag == "Error"
    code = root.findtext("Code")
    assert code
    return code


@pytest.mark.parametrize("length", ["", "-1", "abc", "1e3", "5, 6"])
def test_bad_content_length_is_s3_xml(gateway: Gateway, gw_bucket: str, length: str) -> None:
    target = f"/{gw_bucket}/cl-{abs(hash(length))}"
    headers = rawhttp.sign("PUT", target, _host(gateway), GW_ACCESS, GW_SECRET, body=b"hello")
    headers["Content-Length"] = length
    r = rawhttp.send(gateway.port, "PUT", target, headers, b"hello")
    assert r.status == 400, (r.status, r.body)
    assert _xml_error(r) in ("InvalidArgument", "InvalidRequest")
    # nothing stored
    h = rawhttp.sign("HEAD", target, _host(gateway), GW_ACCESS, GW_SECRET)
    assert rawhttp.send(gateway.port, "HEAD", target, h).status == 404


@pytest.mark.parametrize("body", [b"zz\r\nhello\r\n0\r\n\r\n",  # not a hex chunk size
                                  b"5\r\nhelloXX0\r\n\r\n",  # no CRLF after the chunk
                                  b"-5\r\nhello\r\n0\r\n\r\n"])
def test_bad_chunked_framing_is_s3_xml(gateway: Gateway, gw_bucket: str, body: bytes) -> None:
    target = f"/{gw_bucket}/chunked-{abs(hash(body))}"
    headers = rawhttp.sign("PUT", target, _host(gateway), GW_ACCESS, GW_SECRET,
                           payload=rawhttp.UNSIGNED, headers={"Transfer-Encoding": "chunked"})
    r = rawhttp.send(gateway.port, "PUT", target, headers, body)
    assert 400 <= r.status < 500, (r.status, r.body)
    _xml_error(r)
    h = rawhttp.sign("HEAD", target, _host(gateway), GW_ACCESS, GW_SECRET)
    assert rawhttp.send(gateway.port, "HEAD", target, h).status == 404


@pytest.mark.parametrize("target_fmt,body", [
    ("/{b}?delete", b"<Delete><Object><Key>a</Key></Object>"),  # unterminated
    ("/{b}?delete", b"\xff\xfe<not xml"),
    ("/{b}/k?uploadId=nope", b"<CompleteMultipartUpload><Part>"),
])
def test_unparseable_xml_is_a_4xx(gateway: Gateway, gw_bucket: str, target_fmt: str,
                                  body: bytes) -> None:
    target = target_fmt.format(b=gw_bucket)
    headers = rawhttp.sign("POST", target, _host(gateway), GW_ACCESS, GW_SECRET, body=body)
    r = rawhttp.send(gateway.port, "POST", target, headers, body)
    assert 400 <= r.status < 500, (r.status, r.body)
    assert _xml_error(r) in ("MalformedXML", "NoSuchUpload")


def test_oversized_header_is_s3_xml(gateway: Gateway, gw_bucket: str) -> None:
    target = f"/{gw_bucket}/big-header"
    headers = rawhttp.sign("GET", target, _host(gateway), GW_ACCESS, GW_SECRET)
    headers["x-amz-meta-huge"] = "a" * 70000
    r = rawhttp.send(gateway.port, "GET", target, headers)
    assert 400 <= r.status < 500
    assert _xml_error(r) == "RequestHeaderSectionTooLarge"


def test_client_gone_mid_get_is_info_not_500(gateway: Gateway, gw_s3: Any,
                                             gw_bucket: str) -> None:
    """A client that hangs up while a large GetObject is being written: no 500 in /metrics, no
    http.unhandled, an info-level http.client_gone line."""
    gw_s3.put_object(Bucket=gw_bucket, Key="big", Body=os.urandom(4 * 1024 * 1024))
    before = scrape(gateway)
    target = f"/{gw_bucket}/big"
    for _ in range(8):
        headers = rawhttp.sign("GET", target, _host(gateway), GW_ACCESS, GW_SECRET)
        head = (f"GET {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in
                                                       headers.items()) + "\r\n").encode()
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before the handshake
            s.connect(("127.0.0.1", gateway.port))
            s.sendall(head)
            assert s.recv(64).startswith(b"HTTP/1.1 200")  # the answer has started
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00" * 2)
        # closed with RST part-way through the 4 MiB body
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        after = scrape(gateway)
        done = value(after, "s3kv_requests_total", op="GetObject") - \
            value(before, "s3kv_requests_total", op="GetObject")
        if done >= 8:
            break
        time.sleep(0.1)
    gone = value(after, "s3kv_requests_total", op="GetObject", status="499") - \
        value(before, "s3kv_requests_total", op="GetObject", status="499")
    assert done == 8 and gone >= 1
    assert value(after, "s3kv_requests_total", status="500") == \
        value(before, "s3kv_requests_total", status="500")
    lines = [json.loads(x) for x in gateway.log_text().splitlines() if x.startswith("{")]
    assert not [x for x in lines if x.get("event") == "http.unhandled"]
    gone_lines = [x for x in lines if x.get("event") == "http.client_gone"]
    assert gone_lines and all(x.get("level") == "info" for x in gone_lines)


def test_unparseable_create_bucket_body(gateway: Gateway, gw_s3: Any) -> None:
    name = f"xml-{os.urandom(4).hex()}"
    body = b"<CreateBucketConfiguration><LocationConstraint>eu"  # cut short
    headers = rawhttp.sign("PUT", f"/{name}", _host(gateway), GW_ACCESS, GW_SECRET, body=body)
    r = rawhttp.send(gateway.port, "PUT", f"/{name}", headers, body)
    assert (r.status, _xml_error(r)) == (400, "MalformedXML")
    assert name not in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]


def test_a_content_length_repeated_with_one_value(gateway: Gateway, gw_bucket: str) -> None:
    """``Content-Length: 6`` and ``content-length: 6`` (rclone's presigned uploads) are read as
    the one length, as RFC 9112 allows and S3 does: on a connection's first request and on the
    requests after it; repeated lengths that differ stay a 400 and store nothing."""

    def head(target: str, body: bytes, lengths: tuple[int, int], close: bool) -> bytes:
        hs = rawhttp.sign("PUT", target, _host(gateway), GW_ACCESS, GW_SECRET, body=body)
        lines = [f"PUT {target} HTTP/1.1", *(f"{k}: {v}" for k, v in hs.items()),
                 f"Content-Length: {lengths[0]}", f"content-length: {lengths[1]}",
                 *(["Connection: close"] if close else [])]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as s:
        for i, body in enumerate([b"first!", b"second"]):
            s.sendall(head(f"/{gw_bucket}/dup-cl-{i}?x-id=PutObject", body, (6, 6), False) + body)
            r = rawhttp.read_response(s)
            assert r.status == 200, (r.status, r.body)
    for i, body in enumerate([b"first!", b"second"]):
        h = rawhttp.sign("GET", f"/{gw_bucket}/dup-cl-{i}", _host(gateway), GW_ACCESS, GW_SECRET)
        assert rawhttp.send(gateway.port, "GET", f"/{gw_bucket}/dup-cl-{i}", h).body == body
    target = f"/{gw_bucket}/dup-cl-differ"
    r = rawhttp.send(gateway.port, "PUT", target, {}, b"hello!",
                     raw_head=head(target, b"hello!", (6, 5), True))
    assert r.status == 400 and _xml_error(r) in ("InvalidArgument", "InvalidRequest")
    h = rawhttp.sign("HEAD", target, _host(gateway), GW_ACCESS, GW_SECRET)
    assert rawhttp.send(gateway.port, "HEAD", target, h).status == 404


@pytest.mark.parametrize("value", ["caf\udce9", "\udcff\udcfe"])
def test_a_signed_header_that_is_no_utf8(gateway: Gateway, gw_bucket: str, value: str) -> None:
    """A signed header whose value has bytes that are no UTF-8 (``x-amz-meta-m: caf\\xe9``, a
    Latin-1 client's metadata; ``\\udcXX`` is byte XX as sent): signed over the bytes as sent it
    is stored (200), with the wrong secret it is 403 SignatureDoesNotMatch, never a 500 (the
    canonical request was encoded as strict UTF-8: UnicodeEncodeError, 500 InternalError)."""
    target = f"/{gw_bucket}/latin1-{abs(hash(value))}"
    for secret, status in ((GW_SECRET + "x", 403), (GW_SECRET, 200)):
        headers = rawhttp.sign("PUT", target, _host(gateway), GW_ACCESS, secret, body=b"v",
                               headers={"x-amz-meta-m": value})
        r = rawhttp.send(gateway.port, "PUT", target, headers, b"v")
        assert r.status == status, (r.status, r.body)
        if status == 403:
            assert _xml_error(r) == "SignatureDoesNotMatch"
    h = rawhttp.sign("GET", target, _host(gateway), GW_ACCESS, GW_SECRET)
    assert rawhttp.send(gateway.port, "GET", target, h).body == b"v"


def test_an_error_naming_bytes_that_are_no_utf8(gateway: Gateway, gw_s3: Any,
                                                gw_bucket: str) -> None:
    """An error whose message repeats a header's bytes that are no UTF-8
    (``x-amz-object-attributes: ETag,\\xff``: "Invalid attribute name specified: \\xff") is
    its 400 InvalidArgument, the byte written as ``\\xff``; the error document was encoded as
    strict UTF-8 (UnicodeEncodeError: a 500 with no S3 error of its own)."""
    gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"v")
    target = f"/{gw_bucket}/k?attributes"
    headers = rawhttp.sign("GET", target, _host(gateway), GW_ACCESS, GW_SECRET)
    headers["x-amz-object-attributes"] = "ETag,\udcff"  # not signed: the byte as sent
    r = rawhttp.send(gateway.port, "GET", target, headers)
    assert (r.status, _xml_error(r)) == (400, "InvalidArgument"), r.body
    assert "\\xff" in (ET.fromstring(r.body).findtext("Message") or "")
