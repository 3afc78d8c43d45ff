"""Backends for store tests: the real S3 server (moto, over HTTP) and a local directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from s3kv.backends import Backend, FileBackend, S3Backend, S3Location
from tests.support.s3server import MotoServer


async def open_s3(endpoint: str, bucket: str, request_timeout: float = 10.0) -> S3Backend:
    backend = S3Backend(S3Location(bucket, "", (endpoint,)), timeout=request_timeout,
                        connect_timeout=1.0)
    await backend.open()
    await backend.ensure_bucket()
    return backend


@pytest.fixture(params=["s3", "file"])
async def backend(request: pytest.FixtureRequest, s3_server: MotoServer, bucket: str,
                  tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "s3":
        b: Backend = await open_s3(s3_server.endpoint, bucket)
    else:
        b = await FileBackend(tmp_path / "store").open()
    try:
        yield b
    finally:
        await b.close()
