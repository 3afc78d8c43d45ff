"""The plain lane (s3kv/gateway/plainlane.py): plain object PUTs and GETs answered below
aiohttp's request machinery, as the S3 handlers answer them; every other request, and the rest
of its connection, theirs.

Real parts: a gateway process (``--etag fast``, the lane's mode) on moto, and one on a file://
store (where a PUT's body lands straight in its segment), raw keep-alive sockets signed with
SigV4 (tests/support/rawhttp.py) and boto3. Which side answered is read
from the gateway's ``s3kv_plain_lane_requests_total``; answers are compared with the same
request sent with one header the lane does not take (``X-Slow``), which the S3 handlers ignore.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import (
    GW_ACCESS,
    GW_SECRET,
    SMALL,
    Gateway,
    backend_store,
    gateway_client,
    running_gateway,
    store_stats,
)
from tests.support.rawhttp import UNSIGNED, Response, sign
from tests.support.s3server import MotoServer

BUCKET = "plainlane"
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#: a file:// store's gateway, whose segments seal only when told (``store_stats(flush=True)``)
FILE_ARGS = ["--segment-size", "64MiB", "--part-size", "8MiB", "--sync-interval", "0",
             "--dram-cache", "0", "--etag", "fast"]
#: headers whose values differ from one answer to the next
VARYING = {"date", "x-amz-request-id", "last-modified"}


@pytest.fixture(scope="module")
def gw(s3_server: MotoServer) -> Iterator[Gateway]:
    with running_gateway(backend_store(s3_server), [*SMALL, "--etag", "fast"]) as g:
        gateway_client(g.endpoint).create_bucket(Bucket=BUCKET)
        yield g


@pytest.fixture
def filegw(tmp_path: Path) -> Iterator[Gateway]:
    with running_gateway(f"file://{tmp_path}/store", FILE_ARGS) as g:
        gateway_client(g.endpoint).create_bucket(Bucket=BUCKET)
        yield g


def lane_count(gw: Gateway) -> int:
    text = urllib.request.urlopen(f"{gw.endpoint}/metrics").read().decode()
    found = re.search(r"^s3kv_plain_lane_requests_total (\S+)$", text, re.M)
    assert found is not None, "the lane's counter is not in /metrics"
    return int(float(found.group(1)))


def request(gw: Gateway, method: str, target: str, body: bytes = b"",
            extra: dict[str, str] | None = None) -> bytes:
    """A signed keep-alive request's bytes, as boto3 sends a plain one (UNSIGNED-PAYLOAD)."""
    host = f"127.0.0.1:{gw.port}"
    hs = sign(method, target, host, GW_ACCESS, GW_SECRET, body=body,
              payload=UNSIGNED if method == "PUT" else EMPTY, headers=extra)
    hs.setdefault("host", host)
    if method == "PUT":
        hs["Content-Length"] = str(len(body))
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hs.items())
    return (head + "\r\n").encode() + body


class Conn:
    """One keep-alive connection; answers read one after another, in order."""

    def __init__(self, gw: Gateway) -> None:
        self.sock = socket.create_connection(("127.0.0.1", gw.port), timeout=15)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, n: int) -> None:
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"closed with {self.buf[:200]!r}")
            self.buf += chunk

    def answer(self, *, interim: bool = False) -> Response:
        while b"\r\n\r\n" not in self.buf:
            self._fill(len(self.buf) + 1)
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        status_line, *lines = head.decode().split("\r\n")
        _, status, reason = status_line.split(" ", 2)
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (line.partition(":") for line in lines)}
        if interim:
            return Response(int(status), reason, headers)
        n = int(headers.get("content-length", "0"))
        self._fill(n)
        body, self.buf = self.buf[:n], self.buf[n:]
        return Response(int(status), reason, headers, body)


def test_plain_put_and_get_are_answered_in_the_lane_as_the_handlers_answer(gw: Gateway) -> None:
    data = os.urandom(300_000)
    before = lane_count(gw)
    answers = {}
    for side, extra in (("lane", None), ("handlers", {"X-Slow": "1"})):
        conn = Conn(gw)
        try:
            conn.send(request(gw, "PUT", f"/{BUCKET}/same/{side}", data, extra))
            put = conn.answer()
            conn.send(request(gw, "GET", f"/{BUCKET}/same/{side}", extra=extra))
            got = conn.answer()
            conn.send(request(gw, "GET", f"/{BUCKET}/missing/key", extra=extra))
            miss = conn.answer()
        finally:
            conn.close()
        assert (put.status, got.status, miss.status) == (200, 200, 404), side
        assert got.body == data
        assert miss.code == "NoSuchKey"
        answers[side] = [({k: v for k, v in a.headers.items() if k not in VARYING},
                          set(a.headers)) for a in (put, got, miss)]
        assert all("x-amz-request-id" in a.headers for a in (put, got, miss)), side
    assert answers["lane"] == answers["handlers"]
    assert lane_count(gw) == before + 3  # the lane answered its three, and only those


def test_boto3_goes_through_the_lane(gw: Gateway) -> None:
    s3 = gateway_client(gw.endpoint, s3={"payload_signing_enabled": False},
                        request_checksum_calculation="when_required",
                        response_checksum_validation="when_required")
    before = lane_count(gw)
    data = os.urandom(70_000)
    etag = s3.put_object(Bucket=BUCKET, Key="boto/one", Body=data)["ETag"]  # Expect: 100-continue
    got = s3.get_object(Bucket=BUCKET, Key="boto/one")
    assert got["Body"].read() == data and got["ETag"] == etag
    assert lane_count(gw) >= before + 2
    # what the lane stored, the handlers read (a ranged GET is theirs)
    part = s3.get_object(Bucket=BUCKET, Key="boto/one", Range="bytes=10-19")["Body"].read()
    assert part == data[10:20]


def test_a_request_that_is_not_plain_hands_the_connection_over_for_good(gw: Gateway) -> None:
    before = lane_count(gw)
    conn = Conn(gw)
    try:
        conn.send(request(gw, "PUT", f"/{BUCKET}/hand/a", b"first"))
        assert conn.answer().status == 200  # the lane
        conn.send(request(gw, "GET", f"/{BUCKET}?list-type=2&prefix=hand/"))
        listing = conn.answer()
        assert listing.status == 200 and b"<Key>hand/a</Key>" in listing.body
        conn.send(request(gw, "PUT", f"/{BUCKET}/hand/b", b"second"))
        assert conn.answer().status == 200
        conn.send(request(gw, "GET", f"/{BUCKET}/hand/b"))
        assert conn.answer().body == b"second"
    finally:
        conn.close()
    assert lane_count(gw) == before + 1  # after the listing, the connection is aiohttp's


def test_pipelined_plain_requests_are_answered_in_order(gw: Gateway) -> None:
    before = lane_count(gw)
    conn = Conn(gw)
    try:
        conn.send(request(gw, "PUT", f"/{BUCKET}/pipe/1", b"one")
                  + request(gw, "PUT", f"/{BUCKET}/pipe/2", b"two" * 1000)
                  + request(gw, "GET", f"/{BUCKET}/pipe/1")
                  + request(gw, "GET", f"/{BUCKET}/pipe/2"))
        answers = [conn.answer() for _ in range(4)]
    finally:
        conn.close()
    assert [a.status for a in answers] == [200, 200, 200, 200]
    assert answers[2].body == b"one" and answers[3].body == b"two" * 1000
    assert lane_count(gw) == before + 4


def test_failed_checks_get_the_handlers_answers(gw: Gateway) -> None:
    before = lane_count(gw)
    bad = request(gw, "PUT", f"/{BUCKET}/auth/x", b"data").replace(b"Signature=", b"Signature=0")
    conn = Conn(gw)
    try:
        conn.send(bad)
        denied = conn.answer()
    finally:
        conn.close()
    assert denied.status == 403 and denied.code == "SignatureDoesNotMatch"
    conn = Conn(gw)
    try:
        conn.send(request(gw, "PUT", "/no-such-bucket-here/k", b"data"))
        missing = conn.answer()
    finally:
        conn.close()
    assert missing.status == 404 and missing.code == "NoSuchBucket"
    assert lane_count(gw) == before


def test_expect_continue_is_answered_before_the_body(gw: Gateway) -> None:
    data = os.urandom(50_000)
    whole = request(gw, "PUT", f"/{BUCKET}/expect/k", data, {"Expect": "100-continue"})
    head = whole[:-len(data)]
    conn = Conn(gw)
    try:
        conn.send(head)
        assert conn.answer(interim=True).status == 100
        conn.send(data)
        assert conn.answer().status == 200
        conn.send(request(gw, "GET", f"/{BUCKET}/expect/k"))
        assert conn.answer().body == data
    finally:
        conn.close()


def test_a_client_gone_inside_the_body_stores_nothing(gw: Gateway) -> None:
    data = os.urandom(200_000)
    whole = request(gw, "PUT", f"/{BUCKET}/gone/k", data)
    conn = Conn(gw)
    conn.send(whole[:-100_000])
    conn.close()
    conn = Conn(gw)
    try:
        conn.send(request(gw, "GET", f"/{BUCKET}/gone/k"))
        assert conn.answer().status == 404
        conn.send(request(gw, "PUT", f"/{BUCKET}/gone/k", data))  # the budget came back
        assert conn.answer().status == 200
    finally:
        conn.close()


def test_sigterm_lets_a_plain_put_finish_and_closes_idle_lanes(s3_server: MotoServer) -> None:
    store = backend_store(s3_server)
    data = os.urandom(100_000)
    with running_gateway(store, [*SMALL, "--etag", "fast"]) as g:
        gateway_client(g.endpoint).create_bucket(Bucket=BUCKET)
        idle = Conn(g)
        idle.send(request(g, "PUT", f"/{BUCKET}/term/idle", b"x"))
        assert idle.answer().status == 200
        whole = request(g, "PUT", f"/{BUCKET}/term/k", data)
        conn = Conn(g)
        conn.send(whole[:-50_000])
        time.sleep(0.3)
        assert g.proc is not None
        g.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        conn.send(whole[-50_000:])  # the request was in flight: it is let finish
        assert conn.answer().status == 200
        assert g.proc.wait(timeout=30) == 0
        assert idle.sock.recv(1) == b""  # the idle lane was closed, not left to its client
        conn.close()
        idle.close()
    with running_gateway(store, [*SMALL, "--etag", "fast"]) as g2:
        got = gateway_client(g2.endpoint).get_object(Bucket=BUCKET, Key="term/k")
        assert got["Body"].read() == data


def test_a_body_of_a_landing_size_goes_to_the_handlers(gw: Gateway) -> None:
    """From 1 MiB (store/landing.py's LAND_MIN) a body is the handlers', which land it in its
    segment where the backend lends a window (the lane would copy it once more)."""
    data = os.urandom(1 << 20)
    before = lane_count(gw)
    conn = Conn(gw)
    try:
        conn.send(request(gw, "PUT", f"/{BUCKET}/large/k", data))
        assert conn.answer().status == 200
        conn.send(request(gw, "GET", f"/{BUCKET}/large/k"))
        assert conn.answer().body == data
    finally:
        conn.close()
    assert lane_count(gw) == before


def _put_get(gw: Gateway, blobs: dict[str, bytes], *, put: bool) -> None:
    conn = Conn(gw)
    try:
        for key, data in blobs.items():
            if put:
                conn.send(request(gw, "PUT", f"/{BUCKET}/{key}", data))
                assert conn.answer().status == 200, key
            conn.send(request(gw, "GET", f"/{BUCKET}/{key}"))
            assert conn.answer().body == data, key
    finally:
        conn.close()


def test_a_plain_put_lands_in_its_segment_on_the_file_backend(filegw: Gateway) -> None:
    """A body mostly still to come after its head (64 KiB or more) is received straight into
    its segment's file, as the handlers' large bodies are; a smaller one is appended."""
    blobs = {"land/256k": os.urandom(256 * 1024), "land/odd": os.urandom(300_001),
             "land/small": os.urandom(20_000)}
    before = lane_count(filegw)
    _put_get(filegw, blobs, put=True)  # read back from the open segment
    assert lane_count(filegw) == before + 2 * len(blobs)
    assert store_stats(filegw.endpoint, flush=True)["blocks_landed"] == 2
    _put_get(filegw, blobs, put=False)  # from the sealed segment's file
    filegw.stop()
    filegw.start()
    _put_get(filegw, blobs, put=False)  # the index rebuilt from the manifest


def test_a_client_gone_inside_a_landing_body_stores_nothing(filegw: Gateway) -> None:
    """Its room is given up: nothing stored, the budget back, the segment still seals."""
    data = os.urandom(256 * 1024)
    whole = request(filegw, "PUT", f"/{BUCKET}/cut/k", data)
    conn = Conn(filegw)
    conn.send(whole[:-100_000])
    time.sleep(0.2)
    conn.close()
    _put_get(filegw, {"cut/other": data}, put=True)
    assert store_stats(filegw.endpoint, flush=True)["blocks_landed"] == 1  # the seal was not held
    conn = Conn(filegw)
    try:
        conn.send(request(filegw, "GET", f"/{BUCKET}/cut/k"))
        assert conn.answer().status == 404
    finally:
        conn.close()
    _put_get(filegw, {"cut/k": data}, put=True)


def _corrupt(root: Path, data: bytes) -> None:
    """Flip one byte of ``data`` in the one file under ``root`` that holds it."""
    found = 0
    for path in root.rglob("*"):
        if path.is_file() and (at := path.read_bytes().find(data[:4096])) >= 0:
            with path.open("r+b") as f:  # the gateway's mappings of the file see it too
                f.seek(at + 1000)
                f.write(bytes([data[1000] ^ 0xFF]))
            found += 1
    assert found == 1


@pytest.mark.parametrize("sealed", [False, True])
def test_a_corrupt_block_is_a_miss_in_the_lane(filegw: Gateway, tmp_path: Path,
                                               sealed: bool) -> None:
    """A GET answered at once verifies the block on the loop as the store's reads do: bytes
    that fail their checksum are never sent (404 NoSuchKey, counted), whether they are in the
    open segment's file or in a sealed one's."""
    data = os.urandom(256 * 1024)
    _put_get(filegw, {"bad/victim": data}, put=True)
    before = store_stats(filegw.endpoint, flush=sealed)["checksum_failures"]
    _put_get(filegw, {"bad/victim": data}, put=False)  # mapped, at hand
    _corrupt(tmp_path / "store", data)
    conn = Conn(filegw)
    try:
        conn.send(request(filegw, "GET", f"/{BUCKET}/bad/victim"))
        miss = conn.answer()
    finally:
        conn.close()
    assert (miss.status, miss.code) == (404, "NoSuchKey")
    assert store_stats(filegw.endpoint)["checksum_failures"] == before + 1
