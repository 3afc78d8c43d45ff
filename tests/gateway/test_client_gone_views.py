"""A GET its client cuts short lets go of the views of the segment it was sending (app.py's
``_let_go``): aiohttp raises "Connection lost" into the write from a future that keeps the
exception, whose traceback keeps the frame holding that future: a cycle holding every frame
the exception left, with their views of the segment file's mapping. Until a full collection
(rare in the gateway: server.tune_gc), the file of that segment, once dead or evicted, could
not be recycled (it was deleted, and the next segment was written on a new file's pages).

Real parts: a gateway process on a file:// store; raw sockets as clients, four of which reset
their connections after 1 MiB of a 32 MiB GET. Every segment dead after the deletes must end
in the file backend's pool of recycled files (``.recycled`` in the store's directory)."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3kv.sizes import MiB
from tests.support.gateway import Gateway, running_gateway

ARGS = ["--max-block-size", "64MiB", "--max-request-memory", "1GiB", "--capacity", "1GiB",
        "--sync-interval", "0", "--dram-cache", "0"]


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    with running_gateway(f"file://{tmp_path}/store", ARGS, credentials=False) as g:
        yield g


def _connect(gw: Gateway) -> socket.socket:
    host, port = gw.endpoint.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _request(gw: Gateway, head: str, body: bytes = b"") -> bytes:
    with _connect(gw) as sock:
        sock.sendall(head.encode() + body)
        return sock.recv(64)


def _cut_get(gw: Gateway, key: str) -> socket.socket:
    """A GET that has read 1 MiB of its answer (then left open: closed by the caller)."""
    sock = _connect(gw)
    sock.sendall(f"GET /bkt/{key} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    got = 0
    while got < MiB:
        got += len(sock.recv(MiB - got))
    return sock


def test_segments_read_by_gets_cut_short_are_recycled(gw: Gateway, tmp_path: Path) -> None:
    assert b" 200 " in _request(gw, "PUT /bkt HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
    data = os.urandom(32 * MiB)
    for i in range(8):  # a 256 MiB segment and the start of a second one
        assert b" 200 " in _request(
            gw, f"PUT /bkt/o{i} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(data)}\r\n\r\n",
            data)
    assert b" 200 " in _request(
        gw, "POST /v1/flush HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
    cut = [_cut_get(gw, f"o{i}") for i in range(4)]  # all four in the first segment
    for sock in cut:  # a reset: the gateway's next read or write fails
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    time.sleep(0.5)
    for i in range(8):
        assert b" 204 " in _request(gw, f"DELETE /bkt/o{i} HTTP/1.1\r\nHost: t\r\n\r\n")
    pool = tmp_path / "store" / ".recycled"
    deadline = time.monotonic() + 20
    while len(os.listdir(pool)) < 2 and time.monotonic() < deadline:  # eviction rounds
        time.sleep(0.25)
    assert len(os.listdir(pool)) == 2  # both dead segments' files, none deleted
