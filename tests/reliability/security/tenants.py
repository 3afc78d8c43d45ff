"""The security suite's tenants: four credentials (an unrestricted admin and ops, two teams
restricted to their namespaces), their buckets, and a raw signed client for each.

Everything runs against the real gateway process (``s3kv serve``) over HTTP: on the moto S3
server, and on the file backend where the filesystem is checked for anything written or read
outside the store directory. Requests are sent raw (tests/support/rawhttp.py) so that the test,
not a client library, chooses every byte.
"""

from __future__ import annotations

import uuid
from fnmatch import fnmatchcase
from typing import Any

from tests.support.gateway import GW_ACCESS, GW_SECRET, Gateway
from tests.support.rawhttp import Response, send, sign, well_formed

DOMAIN = "s3.localtest"
RID = uuid.uuid4().hex[:6]
A_BUCKET, A_SHARED = f"team-a-{RID}", "shared"
B_BUCKET, B_GHOST = f"team-b-{RID}", f"team-b-ghost-{RID}"
OTHER, OTHER_GHOST = f"other-{RID}", f"other-ghost-{RID}"
ALL_BUCKETS = [A_BUCKET, A_SHARED, B_BUCKET, B_GHOST, OTHER, OTHER_GHOST]
EXISTING = [A_BUCKET, A_SHARED, B_BUCKET, OTHER]

CREDS: dict[str, tuple[str, list[str] | None]] = {
    "admin": (GW_SECRET, None),  # S3KV_ACCESS_KEY/S3KV_SECRET_KEY: unrestricted
    "team-a": ("team-a-secret/0123+x", ["team-a-*", "shared"]),
    "team-b": ("team-b-secret=4567", ["team-b-*"]),
    "ops": ("ops-secret-89", None),  # in the file, without namespaces: unrestricted
}
KEYS = {"admin": GW_ACCESS, "team-a": "team-a", "team-b": "team-b", "ops": "ops"}

CREDENTIALS_TOML = """
[[credential]]
access_key = "team-a"
secret_key = "team-a-secret/0123+x"
namespaces = ["team-a-*", "shared"]

[[credential]]
access_key = "team-b"
secret_key = "team-b-secret=4567"
namespaces = ["team-b-*"]

[[credential]]
access_key = "ops"
secret_key = "ops-secret-89"
"""


def allows(who: str, bucket: str) -> bool:
    patterns = CREDS[who][1]
    return patterns is None or any(fnmatchcase(bucket, p) for p in patterns)


class Client:
    """Raw, signed requests as one credential; counts what it sends."""

    def __init__(self, gw: Gateway, who: str, counter: list[int]) -> None:
        self.gw, self.who, self.counter = gw, who, counter
        self.access, self.secret = KEYS[who], CREDS[who][0]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.gw.port}"

    def __call__(self, method: str, target: str, body: bytes = b"", *,
                 headers: dict[str, str] | None = None, host: str | None = None,
                 access: str | None = None, secret: str | None = None,
                 when: Any = None) -> Response:
        hs = sign(method, target, host or self.host, access or self.access,
                  secret or self.secret, body=body, headers=headers, when=when)
        self.counter[0] += 1
        return send(self.gw.port, method, target, hs, body)

    def bearer(self, method: str, path: str, body: bytes = b"", token: str | None = None
               ) -> Response:
        self.counter[0] += 1
        tok = token if token is not None else f"{self.access}:{self.secret}"
        return send(self.gw.port, method, path, {"Authorization": f"Bearer {tok}",
                                                 "Content-Type": "application/json"}, body)


def client(gw: Gateway, who: str, counter: list[int]) -> Client:
    return Client(gw, who, counter)


def check(resp: Response, *, native: bool = False) -> Response:
    problem = well_formed(resp, native=native)
    assert problem is None, problem
    return resp

