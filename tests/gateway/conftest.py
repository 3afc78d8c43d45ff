"""A real gateway process (``python -m s3kv.cli serve``) on a real S3 server, and clients for it.

The gateway runs as a subprocess, as in production: tests reach it only over HTTP, can kill it
(SIGKILL, SIGTERM), restart it on the same store and read its memory from /proc. Every process
started here is stopped by the fixture that started it, also when a test fails. The default
gateway is shared by the whole session (starting one costs about a second).
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.gateway.badinput import server_errors
from tests.support.gateway import (  # noqa: F401  (re-exported for the gateway tests)
    DOMAIN,
    GW_ACCESS,
    GW_SECRET,
    MAX_BLOCK,
    MULTIPART,
    ROOT,
    SMALL,
    TOKEN,
    Gateway,
    backend_store,
    gateway_client,
    running_gateway,
    store_stats,
)
from tests.support.s3server import MotoServer

#: the default gateway's settings: small segments, virtual-hosted-style names, a DRAM cache
DEFAULT_ARGS = [*SMALL, "--domain", DOMAIN, "--dram-cache", "32MiB"]


@pytest.fixture(scope="session")
def default_gateway(s3_server: MotoServer) -> Iterator[Gateway]:
    """One gateway for every test module here that takes the default settings, on its own
    backend bucket of the shared moto server; tests isolate themselves by bucket (``gw_bucket``
    is unique per test). A module that needs other settings defines a ``gateway`` fixture of
    its own."""
    with running_gateway(backend_store(s3_server), DEFAULT_ARGS) as gw:
        yield gw


@pytest.fixture(scope="session")
def gateway(default_gateway: Gateway) -> Gateway:
    return default_gateway


@pytest.fixture(scope="session")
def multipart_gateway(s3_server: MotoServer) -> Iterator[Gateway]:
    """One gateway with blocks up to 16 MiB (multipart objects of a few parts), shared by the
    modules that need them; one that restarts it leaves it running with these settings."""
    with running_gateway(backend_store(s3_server), MULTIPART) as gw:
        yield gw


@pytest.fixture
def gw_s3(gateway: Gateway) -> Any:
    return gateway_client(gateway.endpoint)


@pytest.fixture
def gw_bucket(gw_s3: Any) -> str:
    """A fresh bucket (namespace) on the module's gateway."""
    name = f"b-{uuid.uuid4().hex[:12]}"
    gw_s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def no_server_errors(gateway: Gateway) -> Iterator[None]:
    """During the test: the gateway answered no request with a 5xx (other than 503). Counted as
    the test's own increase: the gateway is shared with other modules, some of which provoke
    501s on purpose."""
    before = server_errors(gateway)
    yield
    bad = {series: count for series, count in server_errors(gateway).items()
           if count > before.get(series, 0.0)}
    assert not bad, bad


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected socket pair, ours non-blocking as an event loop's socket is (the compiled
    socket loops' tests)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    with ours, theirs:
        yield ours, theirs
