"""Thousands of idle keep-alive connections cost the gateway little memory: a connection holds
the plain lane's 16 KiB head buffer (s3kv/gateway/headbufs.py) only while it reads or serves a
request. Before, each held one from its first byte to its close: 3,000 idle connections took
78 MiB of the gateway's resident set (about 26 KiB each), bounded by no memory setting.

Real parts: the gateway as a subprocess (``s3kv serve``, file:// store, ``--etag fast`` so that
object PUTs and GETs take the plain lane), plain sockets as clients, its anonymous resident set
read from /proc.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import Gateway

CONNECTIONS = 3000
BUCKET = "idle-conns"
KiB = 1024


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(f"file://{tmp_path}/store", ["--etag", "fast", "--sync-interval", "0"],
                 credentials=False)
    gw.start()
    try:
        yield gw
    finally:
        gw.cleanup()


def rss_anon(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * KiB
    raise AssertionError("no RssAnon")


def put(sock: socket.socket, key: str, body: bytes) -> bytes:
    """A plain PUT on ``sock``; the answer's status line."""
    sock.sendall(f"PUT /{BUCKET}/{key} HTTP/1.1\r\nHost: gw\r\nContent-Length: {len(body)}\r\n"
                 "x-amz-content-sha256: UNSIGNED-PAYLOAD\r\n\r\n".encode() + body)
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    return answer.split(b"\r\n", 1)[0]


def test_idle_keepalive_connections_hold_no_head_buffer(gateway: Gateway) -> None:
    req = urllib.request.Request(f"{gateway.endpoint}/{BUCKET}", method="PUT")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    warm = [socket.create_connection(("127.0.0.1", gateway.port)) for _ in range(200)]
    for i, sock in enumerate(warm):
        assert put(sock, f"warm{i}", b"w" * 1000) == b"HTTP/1.1 200 OK"
        sock.close()
    time.sleep(0.5)
    before = rss_anon(gateway.pid)
    conns = [socket.create_connection(("127.0.0.1", gateway.port)) for _ in range(CONNECTIONS)]
    try:
        for i, sock in enumerate(conns[::2]):  # half of them served a request, then idle
            assert put(sock, f"k{i}", b"x" * 3000) == b"HTTP/1.1 200 OK"
        time.sleep(1.0)
        grown = rss_anon(gateway.pid) - before
        assert grown < CONNECTIONS * 10 * KiB, f"{grown / CONNECTIONS / KiB:.1f} KiB each"
        for i, sock in enumerate(conns[1::500]):  # still served
            assert put(sock, f"late{i}", b"y" * 5000) == b"HTTP/1.1 200 OK"
    finally:
        for sock in conns:
            sock.close()
