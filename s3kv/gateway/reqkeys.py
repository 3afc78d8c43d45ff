"""What a request carries from one layer of the front to the next, as aiohttp's typed request
storage keys: the operation's name (metrics, logs), the request id, the verified signature (a
streamed body's chunk signatures are checked against it) and the credential that made it."""

from __future__ import annotations

from aiohttp import web

from s3kv.gateway.access import Credential
from s3kv.wire.sigv4_verify import AuthContext

OP: web.RequestKey[str] = web.RequestKey("s3kv_op", str)
REQUEST_ID: web.RequestKey[str] = web.RequestKey("s3kv_request_id", str)
AUTH: web.RequestKey[AuthContext | None] = web.RequestKey("s3kv_auth")
CALLER: web.RequestKey[Credential] = web.RequestKey("s3kv_caller", Credential)
#: the client sent ``Expect: 100-continue`` and has not been asked for its body yet
EXPECTING: web.RequestKey[bool] = web.RequestKey("s3kv_expecting", bool)
