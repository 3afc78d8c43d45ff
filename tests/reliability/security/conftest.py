"""The security suite's gateway: one per package (per test worker), with the tenants'
credentials file, virtual-host addressing under ``DOMAIN`` and direct reads on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.security.tenants import CREDENTIALS_TOML, DOMAIN
from tests.support.gateway import SMALL, Gateway, backend_store, running_gateway
from tests.support.s3server import MotoServer


@pytest.fixture(scope="package")
def cred_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("creds") / "credentials.toml"
    path.write_text(CREDENTIALS_TOML)
    return path


@pytest.fixture(scope="package")
def gw(s3_server: MotoServer, cred_file: Path) -> Iterator[Gateway]:
    args = [*SMALL, "--domain", DOMAIN, "--credentials-file", str(cred_file),
            "--direct-reads", "60"]  # locate answers URLs, to unrestricted callers only
    with running_gateway(backend_store(s3_server), args) as g:
        yield g


@pytest.fixture
def counter() -> list[int]:
    """Requests a test sent (its row of the reliability report)."""
    return [0]
