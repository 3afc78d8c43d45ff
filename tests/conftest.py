"""Shared fixtures: a real S3 server process on loopback, and boto3 clients for it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.support.s3server import ACCESS_KEY, REGION, SECRET_KEY, MotoServer

# Backend credentials for every S3 client the tests create (standard AWS variables).
os.environ.setdefault("AWS_ACCESS_KEY_ID", ACCESS_KEY)
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
os.environ.setdefault("AWS_DEFAULT_REGION", REGION)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoServer]:
    """One moto standalone server for the whole session (buckets are unique per test)."""
    server = MotoServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def private_s3_server() -> Iterator[MotoServer]:
    """A server of the test's own, for tests that stop, pause or restart it."""
    server = MotoServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def make_s3_client(endpoint: str) -> Any:
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name=REGION,
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        config=Config(retries={"max_attempts": 2}, s3={"addressing_style": "path"}),
    )


@pytest.fixture
def s3_client(s3_server: MotoServer) -> Any:
    return make_s3_client(s3_server.endpoint)


@pytest.fixture
def bucket(s3_client: Any) -> str:
    """A fresh, empty bucket on the shared server."""
    name = f"t-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=name)
    return name


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="run the full reliability suite (tests/reliability): longer loads, "
                          "more crashes and faults; CI runs the short version")
    parser.addoption("--reliability-report", metavar="PATH", default=None,
                     help="write the reliability suite's table (Markdown) and counts (JSON, "
                          "PATH with .json) here")
