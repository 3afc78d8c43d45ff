"""Hostile input to the native API (/v1) over HTTP: each a clear 4xx with the project's error
codes, never a 500, and nothing of a refused batch stored."""

from __future__ import annotations

import json

import pytest

from tests.gateway.badinput import assert_healthy, send
from tests.gateway.conftest import GW_ACCESS, GW_SECRET, Gateway

#: during every test here the gateway answers no request with a 5xx other than 503
pytestmark = pytest.mark.usefixtures("no_server_errors")

AUTH = {"Authorization": f"Bearer {GW_ACCESS}:{GW_SECRET}"}


def _error(gateway: Gateway, path: str, body: bytes, headers: dict[str, str] | None = None
           ) -> tuple[int, str]:
    r = send("POST", f"{gateway.endpoint}{path}", body=body, headers={**AUTH, **(headers or {})})
    return r.status, json.loads(r.body).get("error", "")


@pytest.mark.parametrize("op", ["lookup", "batch-get", "delete", "list"])
def test_deeply_nested_json_is_invalid_argument(gateway: Gateway, gw_bucket: str,
                                                op: str) -> None:
    """JSON nested deeper than the parser recurses (a few KiB of brackets) was a 500."""
    for body in (b"[" * 100_000 + b"]" * 100_000, b'{"keys": ' + b"[" * 5000 + b"]" * 5000
                 + b"}"):
        assert _error(gateway, f"/v1/{gw_bucket}/{op}", body) == (400, "InvalidArgument")
    assert_healthy(gateway)
