"""Batch gets whose clients reset their connection mid-answer (the file backend: blocks sent by
the compiled send, s3kv/wire/blocksend.py) are clients gone (499, ``http.client_gone``), never
500 and ``http.unhandled``. Before, a reset the compiled send met before the event loop had
seen it raised ConnectionResetError while the transport still looked open, so the middleware
took it for a bug: 2 of 10 such batch gets were logged at error and counted as 500.

Real parts: the gateway as a subprocess (``s3kv serve`` on a file:// store), raw sockets that
read the first MiB of the answer and close with a reset (SO_LINGER 0).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3kv.frames import frames_head
from s3kv.wire import blocksend
from tests.support.gateway import Gateway

pytestmark = pytest.mark.skipif(blocksend.sender() is None,
                                reason="the compiled send did not build (no C compiler)")

NS = "resets"
KEYS = [f"k{i}" for i in range(30)]
MiB = 1024 * 1024


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(f"file://{tmp_path}/store", ["--sync-interval", "0"], credentials=False)
    gw.start()
    try:
        yield gw
    finally:
        gw.cleanup()


def call(gw: Gateway, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None) -> bytes:
    req = urllib.request.Request(gw.endpoint + path, data=body or None, method=method,
                                 headers=headers or {})
    with urllib.request.urlopen(req, timeout=30) as resp:
        data: bytes = resp.read()
        return data


def test_batch_gets_reset_mid_answer_are_clients_gone(gateway: Gateway) -> None:
    call(gateway, "PUT", f"/{NS}")
    blocks = [(k, os.urandom(MiB)) for k in KEYS]
    body = frames_head([(k, len(v)) for k, v in blocks]) + b"".join(v for _, v in blocks)
    call(gateway, "POST", f"/v1/{NS}/batch-put", body,
         {"Content-Type": "application/x-s3kv-frames"})
    call(gateway, "POST", "/v1/flush")
    doc = json.dumps({"keys": KEYS}).encode()
    for _ in range(30):
        sock = socket.create_connection(("127.0.0.1", gateway.port))
        sock.sendall(f"POST /v1/{NS}/batch-get HTTP/1.1\r\nHost: gw\r\nContent-Length: "
                     f"{len(doc)}\r\n\r\n".encode() + doc)
        got = 0
        while got < MiB:
            got += len(sock.recv(MiB - got))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset, the rest of the answer unread
    metrics = call(gateway, "GET", "/metrics").decode()
    statuses = [line for line in metrics.splitlines()
                if line.startswith('s3kv_requests_total{op="NativeBatchGet"')]
    assert statuses and all('status="499"' in line or 'status="200"' in line
                            for line in statuses), statuses
    assert "http.unhandled" not in gateway.log_text()
