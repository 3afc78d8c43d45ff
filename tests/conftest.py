"""Shared fixtures: a real S3 server process on loopback, and boto3 clients for it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.support.rgw import RGWCluster
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


@pytest.fixture(scope="session")
def rgw_server() -> Iterator[RGWCluster]:
    """One Ceph RGW (mon, OSD, radosgw) for the whole session, for tests marked ``rgw``.

    Its S3 user has the same keys as moto's (the AWS variables above), so the same clients and
    gateway subprocesses sign for either. Missing Ceph packages are an error (RGWError names
    the apt-get line), never a skip: ``--rgw`` asks for these tests.
    """
    server = RGWCluster(access_key=ACCESS_KEY, secret_key=SECRET_KEY)
    server.start()
    try:
        yield server
    finally:
        server.stop()


#: parametrise a fixture over the S3 servers a suite runs against: moto always, RGW with --rgw
S3_SERVERS = ["moto", pytest.param("rgw", marks=pytest.mark.rgw)]


def s3_server_for(request: pytest.FixtureRequest, kind: str) -> MotoServer | RGWCluster:
    """The session's moto or RGW server, by a ``S3_SERVERS`` parameter (RGW started lazily)."""
    name = "rgw_server" if kind == "rgw" else "s3_server"
    server: MotoServer | RGWCluster = request.getfixturevalue(name)
    return server


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
    parser.addoption("--rgw", action="store_true", default=False,
                     help="also run the tests marked rgw against a real Ceph RGW on loopback "
                          "(needs: apt-get install -y --no-install-recommends ceph-mon "
                          "ceph-osd radosgw ceph-common; missing packages fail, never skip); "
                          "without it they are deselected")
    parser.addoption("--long", action="store_true", default=False,
                     help="run the full reliability suite (tests/reliability) and the store's "
                          "model (tests/store/test_store_model.py): longer loads, more crashes, "
                          "faults and sequences; CI runs the short version")
    parser.addoption("--reliability-report", metavar="PATH", default=None,
                     help="write the reliability suite's table (Markdown) and counts (JSON, "
                          "PATH with .json) here")


@pytest.fixture(scope="session")
def long_run(request: pytest.FixtureRequest) -> bool:
    """True with --long: run the full versions (more iterations, longer loads)."""
    return bool(request.config.getoption("--long"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``--rgw`` the ``rgw`` tests are deselected (counted as such in the summary)."""
    if config.getoption("--rgw"):
        return
    keep = [item for item in items if item.get_closest_marker("rgw") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
