"""Operations endpoints (/healthz, /readyz, /metrics) and request authentication."""

from __future__ import annotations

import asyncio
import hmac
import time

from aiohttp import web

from s3kv.errors import BackendError, RequestError
from s3kv.gateway.sigv4 import AuthContext, has_auth
from s3kv.gateway.state import GatewayState, state_of

READY_PROBE_TIMEOUT = 2.0


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
    """Verify the request's SigV4 signature (or bearer token on /v1). None: anonymous mode."""
    if st.verifier is None:
        return None
    header = request.headers.get("Authorization", "")
    if request.path.startswith("/v1/") and header.startswith("Bearer "):
        token = header[len("Bearer "):].strip()
        if any(hmac.compare_digest(token, t) for t in st.tokens):
            return None
        raise RequestError("AccessDenied", "Invalid bearer token.", 403)
    if not has_auth(raw_query, request.headers):
        raise RequestError("AccessDenied", "Anonymous access is not allowed; sign requests "
                           "with SigV4 (the gateway's access and secret key).", 403)
    return st.verifier.verify(request.method, raw_path, raw_query, request.headers, time.time())
