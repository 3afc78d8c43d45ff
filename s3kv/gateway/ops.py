"""Operations endpoints (/healthz, /readyz, /metrics) and request authentication."""

from __future__ import annotations

import asyncio
import hmac
import time

from aiohttp import web

from s3kv.errors import BackendError, RequestError
from s3kv.gateway.access import ANONYMOUS, Credential
from s3kv.gateway.classify import hoisted
from s3kv.gateway.reqkeys import CALLER, OP
from s3kv.gateway.state import GatewayState, state_of
from s3kv.wire import sigv2
from s3kv.wire.sigv4_verify import AuthContext, has_auth, query_params

READY_PROBE_TIMEOUT = 2.0


async def healthz(request: web.Request) -> web.StreamResponse:
    """The process is alive and its event loop answers."""
    request[OP] = "Healthz"
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.StreamResponse:
    """Ready: index loaded, backend reachable, not shutting down."""
    request[OP] = "Readyz"
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
    if not st.store.writer.health.healthy:
        problems.append(f"backend unhealthy: {st.store.writer.health.last_error}")
    if problems:
        return web.json_response({"status": "not ready", "problems": problems}, status=503)
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.StreamResponse:
    request[OP] = "Metrics"
    st = state_of(request)
    return web.Response(body=st.metrics.render(),
                        content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


def authenticate(request: web.Request, st: GatewayState, raw_path: str, raw_query: str, *,
                 bucket_in_host: str = "") -> AuthContext | None:
    """Verify the request's signature (SigV4 or SigV2, header or presigned; a bearer token on
    /v1). None: anonymous mode, SigV2 or a bearer token. Either way ``caller(request)`` is then
    the credential that made it. ``bucket_in_host``: the bucket of a virtual-hosted request
    (SigV2 signs it as part of the resource)."""
    if st.verifier is None:
        request[CALLER] = ANONYMOUS
        return None
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if request.path.startswith("/v1/") and scheme == "Bearer":
        request[CALLER] = _bearer(st, token.strip())
        return None
    params = query_params(raw_query)
    if sigv2.is_v2(params, request.headers) and st.verifier_v2 is not None:
        _check_v2_request(request, params)
        v2 = st.verifier_v2.verify(request.method, raw_path, raw_query, request.headers, params,
                                   time.time(), bucket_in_host=bucket_in_host)
        request[CALLER] = st.credentials[v2.access_key]
        return None
    if not has_auth(raw_query, request.headers):
        raise RequestError("AccessDenied", "Anonymous access is not allowed; sign requests "
                           "with SigV4 or SigV2 (the gateway's access and secret key).", 403)
    auth = st.verifier.verify(request.method, raw_path, raw_query, request.headers, time.time())
    request[CALLER] = st.credentials[auth.access_key]
    return auth


def _check_v2_request(request: web.Request, params: dict[str, list[str]]) -> None:
    """What SigV2 cannot vouch for: chunk signatures (SigV4 only), and headers a presigned URL
    carries in its query (they are signed as headers: the request must send them as such, or
    the gateway would act on a request other than the one signed)."""
    sha = request.headers.get("x-amz-content-sha256", "")
    if sha.startswith("STREAMING-AWS4-HMAC-SHA256"):
        raise RequestError("InvalidRequest", "aws-chunked bodies with chunk signatures need "
                           "SigV4 request signing.")
    for name, value in hoisted(params).items():
        if request.headers.get(name, "").strip() != value.strip():
            raise RequestError("InvalidArgument", f"The presigned URL names {name}: send the "
                               f"same {name} header with the request.")


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
