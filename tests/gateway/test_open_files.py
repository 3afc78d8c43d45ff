"""A gateway started with a low soft limit on open files raises it to the hard one
(s3kv/gateway/fdlimit.py), so more clients than the soft limit can stay connected and it still
answers. Before, with the soft limit at 256 and 400 idle clients connected, the event loop
logged ``socket.accept() out of system resource`` some 137,000 times in seconds and ``/readyz``
timed out.

Real parts: an ``s3kv serve`` process on a file:// store, started under ``prlimit`` (util-linux)
with a soft limit of 256 and a hard one of 4096, and plain sockets as its clients."""

from __future__ import annotations

import shutil
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import Gateway

pytestmark = pytest.mark.skipif(shutil.which("prlimit") is None,
                                reason="needs util-linux's prlimit to start the gateway")


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(f"file://{tmp_path}/store", [], credentials=False, log_level="info",
                 prefix=("prlimit", "--nofile=256:4096", "--"))
    gw.start()
    try:
        yield gw
    finally:
        gw.kill()


def soft_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-files line")


def test_more_clients_than_the_soft_limit_stay_connected_and_it_answers(
        gateway: Gateway) -> None:
    assert soft_limit(gateway.pid) == 4096
    clients = [socket.create_connection((gateway.host, gateway.port)) for _ in range(400)]
    try:
        with urllib.request.urlopen(gateway.endpoint + "/readyz", timeout=5) as resp:
            assert resp.status == 200
        clients[-1].sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        clients[-1].settimeout(5)
        assert clients[-1].recv(100).startswith(b"HTTP/1.1 200")
    finally:
        for c in clients:
            c.close()
    assert "out of system resource" not in gateway.log_text()
    assert '"limit": 4096' in gateway.log_text()  # gateway.open_files, logged at start
