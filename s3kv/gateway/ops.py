"""Operations endpoints (/healthz, /readyz, /metrics) and request authentication."""

from __future__ import annotations

import asyncio
import hmac
import time

from aiohttp import web

from s3kv.errors import BackendError, RequestError
from s3kv.gateway.access import ANONYMOUS, Credential
from s3kv.gateway.state import GatewayState, state_of
from s3kv.wire.sigv4_verify import AuthContext, has_auth

READY_PROBE_TIMEOUT = 2.0
#: where authenticate() leaves the request's credential
CALLER = "s3kv_caller"


async def healthz(request: web.Request) -> web.StreamResponse:
    """The process is alive and its event loop answers."""
    request["op"] = "Healthz"
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.StreamResponse:
    """Ready: index loaded, backend reachable, not shutting down."""
    request["op"] = "Readyz"
    st = state_of(request)
    problems: list[str] = []
    if st.shutting_down:
        problems.append("shutting down")
    if not st.store.ready:
        problems.append("index not loaded")
    try:
        async with asyncio.timeout(READY_PROBE_TIMEOUT):
            await st.store.backend.check()
    except (BackendError, TimeoutError) as exc:
        problems.append(f"backend unreachable: {exc}")
    if not st.store.writer.healthy:
        problems.append(f"backend unhealthy: {st.store.writer.last_error}")
    if problems:
        return web.json_response({"status": "not ready", "problems": problems}, status=503)
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.StreamResponse:
    request["op"] = "Metrics"
    st = state_of(request)
    return web.Response(body=st.metrics.render(),
                        content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


def authenticate(request: web.Request, st: GatewayState, raw_path: str,
                 raw_query: str) -> AuthContext | None:
    """Verify the request's SigV4 signature (or bearer token on /v1). None: anonymous mode or
    a bearer token. Either way ``caller(request)`` is then the credential that made it."""
    if st.verifier is None:
        request[CALLER] = ANONYMOUS
        return None
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if request.path.startswith("/v1/") and scheme == "Bearer":
        request[CALLER] = _bearer(st, token.strip())
        return None
    if not has_auth(raw_query, request.headers):
        raise RequestError("AccessDenied", "Anonymous access is not allowed; sign requests "
                           "with SigV4 (the gateway's access and secret key).", 403)
    auth = st.verifier.verify(request.method, raw_path, raw_query, request.headers, time.time())
    request[CALLER] = st.credentials[auth.access_key]
    return auth


def _bearer(st: GatewayState, token: str) -> Credential:
    access, _, _ = token.partition(":")
    cred = st.credentials.get(access)
    # compare the whole token in constant time; an unknown key compares against a dummy
    expected = cred.token if cred is not None else "\x00" + token
    if cred is None or not hmac.compare_digest(token.encode(), expected.encode()):
        raise RequestError("AccessDenied", "Invalid bearer token.", 403)
    return cred


def caller(request: web.Request) -> Credential:
    """The authenticated credential of a request (set by :func:`authenticate`)."""
    cred = request.get(CALLER)
    if not isinstance(cred, Credential):
        raise RuntimeError("caller() before authenticate()")
    return cred
