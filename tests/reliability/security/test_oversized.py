"""Security: oversized headers and bodies are refused early and cheaply; a body that does not
match its signed hash is never stored."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
import urllib.request

from tests.reliability.conftest import Report
from tests.reliability.security.tenants import A_BUCKET, check, client
from tests.support import rawhttp
from tests.support.gateway import MAX_BLOCK, Gateway
from tests.support.rawhttp import Response, send, sign


def _alive(g: Gateway) -> None:
    with urllib.request.urlopen(g.endpoint + "/healthz", timeout=5) as r:
        assert r.status == 200


def test_oversized_headers(gw: Gateway, counter: list[int], reliability_report: Report) -> None:
    a = client(gw, "team-a", counter)
    cases: list[tuple[str, str, list[tuple[str, str]]]] = [
        ("header value 64 KiB", f"/{A_BUCKET}/k", [("x-amz-meta-big", "v" * 65536)]),
        ("header name 16 KiB", f"/{A_BUCKET}/k", [("x" * 16384, "v")]),
        ("1000 headers", f"/{A_BUCKET}/k", [(f"x-amz-meta-h{i}", "v") for i in range(1000)]),
        ("URL 64 KiB", f"/{A_BUCKET}/" + "k" * 65536, []),
        ("query 64 KiB", f"/{A_BUCKET}?list-type=2&prefix=" + "p" * 65536, []),
        ("Authorization 64 KiB", f"/{A_BUCKET}/k", [("Authorization", "AWS4-HMAC-SHA256 " +
                                                     "Credential=x," * 5000)]),
        ("Range 8 KiB", f"/{A_BUCKET}/k", [("Range", "bytes=" + "1" * 8000 + "-")]),
    ]
    for name, target, headers in cases:
        counter[0] += 1
        r = send(gw.port, "GET", target, headers)
        assert 400 <= r.status < 500, (name, r.status, r.body[:200])
        _alive(gw)
    # a signed request with a huge signed header: refused as a 4xx before any auth work
    hs = sign("GET", f"/{A_BUCKET}/k", a.host, a.access, a.secret,
              headers={"x-amz-meta-big": "v" * 9000})
    counter[0] += 1
    assert 400 <= send(gw.port, "GET", f"/{A_BUCKET}/k", hs).status < 500
    reliability_report.record("security", "oversized headers, names, URLs, header counts",
                              faults=len(cases) + 1, requests=counter[0])


class RssSampler:
    def __init__(self, g: Gateway) -> None:
        self.g, self.peak, self._stop = g, g.rss_bytes(), threading.Event()
        self.base = self.peak
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.g.rss_bytes())

    def __enter__(self) -> RssSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _stream_body(port: int, head: bytes, total: int, piece: bytes, *,
                 chunked: bool = False) -> tuple[Response, int]:
    """Send ``head`` then up to ``total`` bytes; stop when the server answers or hangs up."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        s.settimeout(0.0)
        try:
            while sent < total:
                try:
                    if s.recv(1, socket.MSG_PEEK):
                        break  # the answer is here
                except BlockingIOError:
                    pass
                data = (b"%x\r\n" % len(piece) + piece + b"\r\n") if chunked else piece
                s.settimeout(30)
                s.sendall(data)
                s.settimeout(0.0)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.settimeout(30)
        return rawhttp.read_response(s), sent


def test_oversized_bodies(gw: Gateway, counter: list[int], reliability_report: Report) -> None:
    a = client(gw, "team-a", counter)
    a("PUT", f"/{A_BUCKET}")
    huge = 1 << 30
    piece = b"\0" * (1 << 20)
    results = []
    with RssSampler(gw) as rss:
        # declared too large: refused before a byte of the body is read
        hs = sign("PUT", f"/{A_BUCKET}/big", a.host, a.access, a.secret,
                  payload=rawhttp.UNSIGNED)
        head = (f"PUT /{A_BUCKET}/big HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hs.items()) + f"Content-Length: {huge}\r\n\r\n").encode()
        t0 = time.monotonic()
        r, sent = _stream_body(gw.port, head, huge, piece)
        results.append(("declared 1 GiB", r, sent, time.monotonic() - t0))
        # undeclared (Transfer-Encoding: chunked): cut off once past --max-block-size
        head_c = head.replace(f"Content-Length: {huge}".encode(), b"Transfer-Encoding: chunked")
        r, sent = _stream_body(gw.port, head_c, 256 << 20, piece, chunked=True)
        results.append(("chunked, undeclared", r, sent, 0.0))
        # aws-chunked with a huge decoded length
        hs2 = sign("PUT", f"/{A_BUCKET}/big", a.host, a.access, a.secret,
                   payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                   headers={"content-encoding": "aws-chunked",
                            "x-amz-decoded-content-length": str(huge)})
        head2 = (f"PUT /{A_BUCKET}/big HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hs2.items()) + f"Content-Length: {huge}\r\n\r\n").encode()
        r, sent = _stream_body(gw.port, head2, huge, piece)
        results.append(("aws-chunked 1 GiB decoded", r, sent, 0.0))
        # aws-chunked, decoded length not declared, frames streaming past the limit
        hs3 = sign("PUT", f"/{A_BUCKET}/big", a.host, a.access, a.secret,
                   payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                   headers={"content-encoding": "aws-chunked"})
        head3 = (f"PUT /{A_BUCKET}/big HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hs3.items()) + "Transfer-Encoding: chunked\r\n\r\n"
                 ).encode()
        frame = b"%x\r\n" % len(piece) + piece + b"\r\n"
        r, sent = _stream_body(gw.port, head3, 256 << 20, frame, chunked=True)
        results.append(("aws-chunked frames, undeclared", r, sent, 0.0))
        # a multipart upload growing past the block size, and a batch-put body
        up = a("POST", f"/{A_BUCKET}/mp?uploads").body.split(b"<UploadId>")[1]
        upload = up.split(b"</UploadId>")[0].decode()
        part = b"p" * (3 << 20)
        assert a("PUT", f"/{A_BUCKET}/mp?partNumber=1&uploadId={upload}", part).status == 200
        r = a("PUT", f"/{A_BUCKET}/mp?partNumber=2&uploadId={upload}", part)
        results.append(("multipart total over the limit", r, len(part), 0.0))
        hs4 = {"Host": a.host, "Authorization": f"Bearer {a.access}:{a.secret}"}
        head4 = (f"POST /v1/{A_BUCKET}/batch-put HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hs4.items()) + f"Content-Length: {huge}\r\n\r\n"
                 ).encode()
        r, sent = _stream_body(gw.port, head4, huge, piece)
        results.append(("batch-put 1 GiB", r, sent, 0.0))
    counter[0] += 5
    for name, r, sent, _ in results:
        check(r, native="batch-put" in name)
        assert (r.status, r.code) == (400, "EntityTooLarge"), (name, r)
        # never read all of it: at most the block limit plus what sat in socket buffers
        assert sent <= MAX_BLOCK + (48 << 20), (name, sent)
    assert results[0][3] < 10
    grown = (rss.peak - rss.base) / 2**20
    assert grown < 64, f"gateway RSS grew {grown:.0f} MiB while refusing oversized bodies"
    assert a("HEAD", f"/{A_BUCKET}/big").status == 404
    _alive(gw)
    reliability_report.record(
        "security", "oversized bodies (declared, chunked, aws-chunked, multipart, batch-put)",
        faults=len(results), requests=counter[0], peak_rss_mib=rss.peak / 2**20,
        note=f"RSS grew {grown:.0f} MiB")


def test_hash_of_signed_payload_is_checked_before_storing(gw: Gateway, counter: list[int],
                                                          reliability_report: Report) -> None:
    """A body that does not match its signed hash is never stored (no partial state)."""
    a = client(gw, "team-a", counter)
    a("PUT", f"/{A_BUCKET}")  # its own bucket (200, or 409 when another test made it)
    target = f"/{A_BUCKET}/hashcheck"
    hs = sign("PUT", target, a.host, a.access, a.secret, body=b"a" * 1000)
    hs["x-amz-content-sha256"] = hashlib.sha256(b"b" * 1000).hexdigest()
    counter[0] += 1
    r = check(send(gw.port, "PUT", target, hs, b"b" * 1000))
    assert r.status == 403  # the header is signed: changing it breaks the signature
    hs = sign("PUT", target, a.host, a.access, a.secret, body=b"a" * 1000)
    counter[0] += 1
    assert check(send(gw.port, "PUT", target, hs, b"b" * 1000)).code == \
        "XAmzContentSHA256Mismatch"
    assert a("HEAD", target).status == 404
    reliability_report.record("security", "signed payload hash mismatch stores nothing",
                              faults=2, requests=counter[0])
