"""The aiohttp application: middlewares (request id, auth, errors, metrics) and routing.

Errors are translated here, once: RequestError carries its S3 code; the store's S3KVError
subclasses map through ``_STATUS``; anything else is a bug, logged and answered 500.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
import traceback
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import HttpVersion11, web

from s3kv.config import Settings
from s3kv.errors import RequestError, S3KVError
from s3kv.gateway import native, ops, s3_buckets, s3_objects
from s3kv.gateway.access import check_namespace, credential_table
from s3kv.gateway.classify import (
    Level,
    check_headers,
    classify,
    hoisted,
    level_of,
    refused_before_auth,
)
from s3kv.gateway.metrics import GatewayMetrics
from s3kv.gateway.reqkeys import AUTH, EXPECTING, OP, REQUEST_ID
from s3kv.gateway.requests import parse_target
from s3kv.gateway.s3xml import XML, error_document
from s3kv.gateway.state import STATE, GatewayState, MemoryBudget, state_of
from s3kv.gateway.translate import to_request_error
from s3kv.log import enabled as log_enabled
from s3kv.log import get_logger
from s3kv.store.store import BlockStore
from s3kv.wire.sigv2 import SigV2Verifier
from s3kv.wire.sigv4_verify import SigV4Verifier, query_params

log = get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

def _error_response(request: web.Request, err: RequestError) -> web.Response:
    rid = request.get(REQUEST_ID, "")
    headers = {"x-amz-request-id": rid, **err.headers}
    if request.path.startswith("/v1/"):
        return web.json_response({"error": err.code, "message": str(err), "request_id": rid},
                                 status=err.status, headers=headers)
    body = b"" if request.method == "HEAD" else error_document(err.code, str(err), request.path,
                                                               rid)
    return web.Response(status=err.status, body=body, headers=headers,
                        content_type=XML)


#: answered even while shutting down (probes and scrapes)
_OPS_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
#: the status metrics record for a request whose client disconnected (nginx's convention)
CLIENT_CLOSED = 499


#: request ids: a random per-process prefix and a counter (16 hex digits, as before, without
#: a urandom call and a UUID per request)
_ID_PREFIX = os.urandom(4).hex().upper()
_ID_COUNTER = itertools.count(1)


def next_request_id() -> str:
    return f"{_ID_PREFIX}{next(_ID_COUNTER) & 0xFFFFFFFF:08X}"


@web.middleware
async def gateway_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    st = state_of(request)
    st.enter()
    try:
        resp = await _handle(request, handler, st)
    finally:
        st.leave()
    if st.shutting_down and not resp.prepared:
        resp.force_close()  # draining: no further requests on this connection
    elif request.get(EXPECTING) and not resp.prepared and not request.content.is_eof():
        resp.force_close()  # answered before the client was asked for its body (RFC 9110 10.1.1)
    return resp


async def _shutting_down(request: web.Request) -> web.StreamResponse:
    """A request that arrived (on a kept-alive connection) after SIGTERM: go elsewhere."""
    request[OP] = "ShuttingDown"
    raise RequestError("ServiceUnavailable", "The gateway is shutting down; retry on another "
                       "replica or after it restarts.", 503, {"Retry-After": "1"})


async def _handle(request: web.Request, handler: Handler,
                  st: GatewayState) -> web.StreamResponse:
    if st.shutting_down and request.path not in _OPS_PATHS:
        handler = _shutting_down
    rid = next_request_id()
    request[REQUEST_ID] = rid
    structlog.contextvars.bind_contextvars(request_id=rid)
    started = time.perf_counter()
    try:
        resp = await handler(request)  # its x-amz-request-id: _stamp_request_id
    except RequestError as exc:
        resp = _error_response(request, exc)
    except S3KVError as exc:
        resp = _error_response(request, to_request_error(exc))
    except web.HTTPException:
        structlog.contextvars.unbind_contextvars("request_id")
        raise
    except Exception as exc:
        # ConnectionError (reset, broken pipe, aiohttp's "Connection lost" while draining a
        # write) on a connection the client has closed: it went away while we answered, nothing
        # to send, nothing broken. Any other exception is a bug.
        if isinstance(exc, ConnectionError) and _client_gone(request):
            log.info("http.client_gone", method=request.method, path=request.path,
                     error=type(exc).__name__)
            _let_go(exc)
            resp = web.Response(status=CLIENT_CLOSED)
        else:
            log.exception("http.unhandled", method=request.method, path=request.path)
            resp = _error_response(request, RequestError(
                "InternalError", "We encountered an internal error. Please try again.", 500))
    try:
        op = request.get(OP, "unknown")
        elapsed = time.perf_counter() - started
        st.metrics.observe(op, resp.status, elapsed)
        # logged while request_id is still bound: every line of a request carries it; the
        # level checked first (a filtered call through the lazy logger is not free)
        if log_enabled(logging.DEBUG):
            log.debug("http.request", method=request.method, path=request.path, op=op,
                      status=resp.status, ms=round(elapsed * 1000, 2))
    finally:
        structlog.contextvars.unbind_contextvars("request_id")
    return resp


def _let_go(exc: BaseException) -> None:
    """Clear the locals of the finished frames ``exc`` (and what caused it) went through.
    aiohttp raises "Connection lost" into a write from the future its drain waits on, which
    keeps the exception, whose traceback keeps the frame that holds the future: a cycle, and
    with it every frame the exception left, their views of a segment's mapping included. Left
    to the collector (rare full collections here: server.tune_gc), those views kept evicted
    segment files from being recycled: the next segments were written on new files' pages."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        traceback.clear_frames(cause.__traceback__)
        cause = cause.__cause__ or cause.__context__


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def s3_dispatch(request: web.Request) -> web.StreamResponse:
    st = state_of(request)
    target = parse_target(request, st.settings.domain)
    refusal = refused_before_auth(request.method, level_of(target.bucket, target.key),
                                  request.headers)
    if refusal is not None:
        request[OP] = "Unsupported"
        raise refusal
    request[AUTH] = ops.authenticate(request, st, target.raw_path, target.raw_query,
                                     bucket_in_host=target.bucket if target.virtual else "")
    if target.bucket:
        # before anything looks at the bucket: another credential's namespace (existing or
        # not) gets the same 403 as any other it may not use, whatever the operation
        check_namespace(ops.caller(request), target.bucket)
    # the allow-list, before any handler: what it does not name is refused here, untouched
    params = query_params(target.raw_query)
    request[OP] = "Unsupported"
    op = classify(request.method, level_of(target.bucket, target.key), params,
                  request.headers)
    request[OP] = op.name
    check_headers(request.headers, hoisted(params))
    if op.level is Level.SERVICE:
        return await s3_buckets.list_buckets(request, st, target)
    if op.level is Level.BUCKET:
        return await s3_buckets.dispatch(request, st, target)
    return await s3_objects.dispatch(request, st, target)


async def expect_continue(request: web.Request) -> None:
    """``Expect: 100-continue``: the client is asked for its body once the body is admitted
    (``bodies.read_body``: authenticated, checked, its memory reserved), not before anything
    is checked, as aiohttp's default does: a request refused first (403, 404, 503 SlowDown when
    the budget is full) gets its answer and the connection is closed (the middleware), its
    body never sent. Any other expectation is ignored: aiohttp's default answers it with a
    plain-text 417 before any middleware runs, never an S3 error document; the request is
    handled as if the header were absent (clients only ever send 100-continue)."""
    expect = request.headers.get("Expect", "")
    if request.version == HttpVersion11 and expect.lower() == "100-continue":
        request[EXPECTING] = True


async def _stamp_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer names its request, a streamed one too (GetObject's head goes out before
    the middleware sees its response)."""
    rid = request.get(REQUEST_ID)
    if rid and "x-amz-request-id" not in response.headers:
        response.headers["x-amz-request-id"] = rid


async def _close_sums(app: web.Application) -> None:
    st = app[STATE]
    st.sums.close()
    if st.receiver is not None:
        st.receiver.close()


def make_app(store: BlockStore, settings: Settings) -> web.Application:
    creds = credential_table(settings.access_key, settings.secret_key, settings.credentials_file)
    secrets = {k: c.secret_key for k, c in creds.items()}
    state = GatewayState(
        store=store, settings=settings, metrics=GatewayMetrics(lambda: state.summary()),
        verifier=SigV4Verifier(secrets) if creds else None,
        budget=MemoryBudget(settings.max_request_memory), credentials=creds,
        verifier_v2=SigV2Verifier(secrets) if creds else None,
    )
    app = web.Application(middlewares=[gateway_middleware],
                          client_max_size=settings.max_block_size + 1024 * 1024)
    app[STATE] = state
    app.on_cleanup.append(_close_sums)
    app.on_response_prepare.append(_stamp_request_id)
    app.router.add_get("/healthz", ops.healthz, expect_handler=expect_continue)
    app.router.add_get("/readyz", ops.readyz, expect_handler=expect_continue)
    app.router.add_get("/metrics", ops.metrics, expect_handler=expect_continue)
    native.add_routes(app, expect_continue)
    # every other path is S3; [\s\S] and not ".": a key with a newline (%0A) must reach the S3
    # handlers (and get their 400 InvalidArgument), not aiohttp's plain-text 404
    app.router.add_route("*", r"/{tail:[\s\S]*}", s3_dispatch, expect_handler=expect_continue)
    return app
