"""Backends for store tests: the real S3 server (moto, over HTTP) and a local directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from s3kv.backends import Backend, FileBackend, S3Backend, S3Location
from s3kv.config import READ_STALL
from tests.conftest import s3_server_for
from tests.support.s3server import MotoServer


async def open_s3(endpoint: str, bucket: str, request_timeout: float = 10.0,
                  read_stall: float = READ_STALL) -> S3Backend:
    backend = S3Backend(S3Location(bucket, "", (endpoint,)), timeout=request_timeout,
                        connect_timeout=1.0, read_stall=read_stall)
    await backend.open()
    await backend.ensure_bucket()
    return backend


async def _open_backend(request: pytest.FixtureRequest, kind: str, s3_server: MotoServer,
                        bucket: str, tmp_path: Path) -> AsyncIterator[Backend]:
    if kind == "s3":
        b: Backend = await open_s3(s3_server.endpoint, bucket)
    elif kind == "rgw":
        b = await open_s3(s3_server_for(request, "rgw").endpoint, f"r{bucket}")
    else:
        b = await FileBackend(tmp_path / "store").open()
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture(params=["s3", "file"])
async def backend(request: pytest.FixtureRequest, s3_server: MotoServer, bucket: str,
                  tmp_path: Path) -> AsyncIterator[Backend]:
    """moto over HTTP and a local directory."""
    async for b in _open_backend(request, request.param, s3_server, bucket, tmp_path):
        yield b


@pytest.fixture(params=["s3", "file", pytest.param("rgw", marks=pytest.mark.rgw)])
async def any_backend(request: pytest.FixtureRequest, s3_server: MotoServer, bucket: str,
                      tmp_path: Path) -> AsyncIterator[Backend]:
    """The backend contract suite's and the restart/recovery tests' backends: ``backend``'s
    two and, with ``pytest --rgw``, Ceph RGW (the bucket is created by ``open_s3``)."""
    async for b in _open_backend(request, request.param, s3_server, bucket, tmp_path):
        yield b
