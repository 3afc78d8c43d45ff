"""The HTTP connection layer: requests aiohttp's parser refuses get S3 XML errors too.

aiohttp answers a request it cannot parse (``Content-Length: -1`` or empty, broken chunked
framing, an oversized header, a bad request line) itself, before any middleware runs, with a
plain-text 400 from ``RequestHandler.handle_error``. :class:`S3RequestHandler` answers those
with an S3 error document (``InvalidArgument``, ``InvalidRequest``,
``RequestHeaderSectionTooLarge``) carrying an ``x-amz-request-id``, and logs them at info level
(``http.bad_request``): a client's malformed request is not the gateway's error.
:func:`front_runner` serves an application's connections through them.
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from s3kv.gateway.s3xml import XML, error_document
from s3kv.log import get_logger

log = get_logger(__name__)


def parse_error_code(status: int, exc: BaseException | None, message: str) -> tuple[str, str]:
    """(S3 code, message) for a request aiohttp's parser refused."""
    text = f"{message or ''} {exc or ''}".lower()
    if isinstance(exc, LineTooLong) or "too long" in text or "too large" in text \
            or status == 431:
        return ("RequestHeaderSectionTooLarge", "Your request header section exceeds the "
                "maximum allowed size.")
    if "content-length" in text:
        return ("InvalidArgument", "Content-Length must be a single non-negative decimal "
                "integer.")
    if "chunk" in text or "transfer-encoding" in text:
        return ("InvalidRequest", "The chunked transfer encoding of the request body is "
                "malformed.")
    if status >= 500:
        return ("InternalError", "We encountered an internal error. Please try again.")
    return ("InvalidRequest", "The request could not be parsed as HTTP/1.1; check the request "
            "line and headers.")


class S3RequestHandler(RequestHandler):
    """aiohttp's connection handler; its own error answers are S3 XML documents."""

    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # a response is under way: nothing else to send
            raise ConnectionError("Response is sent already, cannot send another response "
                                  "with the error message")
        rid = uuid.uuid4().hex[:16].upper()
        code, text = parse_error_code(status, exc, message or "")
        if status >= 500:
            log.error("http.protocol_error", status=status, error=repr(exc), request_id=rid)
        else:
            log.info("http.bad_request", status=status, code=code, detail=message or repr(exc),
                     request_id=rid)
        resp = web.Response(status=status, body=error_document(code, text, "", rid),
                            content_type=XML, headers={"x-amz-request-id": rid})
        resp.force_close()
        return resp


class S3Server(web.Server):
    """aiohttp's low-level server making :class:`S3RequestHandler` connections, for the
    application of ``base`` (its request handler and factory: middlewares, routes, limits)."""

    def __init__(self, base: web.Server, **kwargs: Any) -> None:
        super().__init__(base.request_handler, request_factory=base.request_factory,
                         handler_cancellation=base.handler_cancellation, **kwargs)

    def __call__(self) -> RequestHandler:
        return S3RequestHandler(self, loop=self._loop, **self._kwargs)


def front_runner(app_runner: web.AppRunner, *, shutdown_timeout: float,
                 **handler_args: Any) -> web.ServerRunner:
    """The runner to serve ``app_runner``'s application through (after its ``setup()``):
    the app runner keeps the application's start-up and clean-up, this one the connections.
    ``handler_args``: aiohttp's per-connection settings (``access_log``, ``auto_decompress``)."""
    base = app_runner.server
    if base is None:
        raise RuntimeError("front_runner() before the app runner's setup()")
    return web.ServerRunner(S3Server(base, **handler_args), handle_signals=False,
                            shutdown_timeout=shutdown_timeout)
