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

import asyncio
import inspect
import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web, web_protocol
from aiohttp.http_exceptions import LineTooLong
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from s3kv.gateway.headparser import RequestParser
from s3kv.gateway.s3xml import XML, error_document
from s3kv.gateway.takeover import TAKE_MIN, BodyLanding, BodyTake, LandingReads, Sums, drain
from s3kv.log import get_logger
from s3kv.wire import landrecv
from s3kv.wire.landrecv import Received, Receiver

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


#: aiohttp's defaults for the parser settings a connection handler takes
_DEFAULTS = {name: p.default for name, p in inspect.signature(RequestHandler).parameters.items()
             if p.default is not inspect.Parameter.empty}
#: the parser settings, as RequestHandler passes them to its HttpRequestParser
_PARSER_SETTINGS = ("max_line_size", "max_field_size", "max_headers", "auto_decompress")


class S3RequestHandler(RequestHandler):
    """aiohttp's connection handler; its own error answers are S3 XML documents; a large
    admitted body can be taken from the socket past the parser (:meth:`take_body`).

    The take relies on what aiohttp's ``RequestHandler`` keeps of its connection (``_parser``,
    ``_upgraded``, ``_read_bufsize``, ``_loop``, as aiohttp 3.14 does) and builds a parser as
    it does; an aiohttp without them takes no body (every body goes through its parser), and
    tests/gateway/test_takeover.py fails, so the change is seen."""

    def __init__(self, manager: web.Server, *, loop: asyncio.AbstractEventLoop,
                 **kwargs: Any) -> None:
        super().__init__(manager, loop=loop, **kwargs)
        #: the arguments aiohttp's handler gave its parser (after the handler's read size)
        self._parser_args: dict[str, Any] = {
            **{name: kwargs.get(name, _DEFAULTS.get(name)) for name in _PARSER_SETTINGS},
            "payload_exception": web_protocol.RequestPayloadError}
        if hasattr(web_protocol, "MAX_MSG_QUEUE_SIZE"):  # aiohttp >= 3.13
            self._parser_args["max_msg_queue_size"] = web_protocol.MAX_MSG_QUEUE_SIZE
        self._take: BodyTake | None = None
        self._parser = RequestParser(self, loop, self._read_bufsize, **self._parser_args)

    def can_take(self, content: StreamReader, length: int) -> bool:
        """Whether :meth:`take_body` would take the current request's body (``length`` bytes
        by its Content-Length, read by no one yet): not if most of it is in already, nor on a
        connection that decompresses bodies."""
        return self._takeable(content) and not content.is_eof() \
            and length - content.total_bytes >= TAKE_MIN

    def _takeable(self, content: StreamReader) -> bool:
        """No body is taken now, the handler is as the take expects, and ``content`` is a
        sound body read through the parser."""
        return self._take is None and getattr(self, "_parser", None) is not None \
            and not getattr(self, "_upgraded", True) \
            and not self._parser_args["auto_decompress"] and content.exception() is None

    def can_land(self) -> bool:
        """Whether a body taken here could land (:meth:`land_body`): a plain TCP transport."""
        transport = self.transport
        return transport is not None and transport.get_extra_info("sslcontext") is None \
            and transport.get_extra_info("socket") is not None

    def take_body(self, content: StreamReader, length: int, head: Sequence[bytes] = ()
                  ) -> BodyTake | None:
        """Take the current request's body (as :meth:`can_take` says) from here on: its bytes
        received so far, then each socket read as it is, up to its last byte
        (:mod:`s3kv.gateway.takeover`). ``head``: bytes of it its caller read already through
        the parser (its first pieces; the body is then taken however little is left). None:
        not worth it, or not possible."""
        if not (self.can_take(content, length) or (head and self._takeable(content))):
            return None
        first = [*head, *drain(content)]
        if content.exception() is not None:  # broken framing: the reader gets the error
            return None
        if content.is_eof():  # the parser saw the body's end while it was drained
            return BodyTake(content, first, 0)
        self._take = BodyTake(content, first, length - content.total_bytes)
        return self._take

    def land_body(self, content: StreamReader, length: int, spans: list[memoryview],
                  head: Sequence[bytes] = (), sums: Sums | None = None,
                  receiver: Receiver | None = None) -> BodyLanding | None:
        """Receive the current request's body (``length`` bytes by its Content-Length) straight
        into ``spans`` (writable windows), but for ``head``, bytes of it its caller read
        already through the parser: its bytes received so far are copied in, then the
        transport reads into them up to the body's last byte. None: not possible (spans that
        are not the rest of the body, a broken body, a connection that cannot land: read it
        as usual). ``sums``: fed each piece of the spans as it is filled; with a
        ``receiver`` that has a worker free, the rest is received off the event loop, the
        sums worked out as it comes (wire/landrecv.py)."""
        transport = self.transport
        if transport is None or not self.can_land() or not self._takeable(content) \
                or sum(map(len, head)) + sum(map(len, spans)) != length:
            return None
        first = drain(content)
        if content.exception() is not None:  # broken framing: the reader gets the error
            return None
        off_loop = sums is not None and receiver is not None and receiver.can_start() \
            and not content.is_eof() and transport.is_reading() \
            and length - sum(map(len, head)) - sum(map(len, first)) >= landrecv.LEAST
        landing = BodyLanding(content, list(head), first, spans, sums, deferred=off_loop)
        if landing.remaining and not content.is_eof():
            self._take = landing
            transport.set_protocol(LandingReads(self, landing, self._end_landing))
            if off_loop and receiver is not None:
                self._receive_off_loop(landing, receiver)
        return landing

    def _receive_off_loop(self, landing: BodyLanding, receiver: Receiver) -> None:
        """The rest of ``landing`` received by ``receiver``'s compiled loop, the transport's
        reading paused meanwhile; then whatever is left by the transport as usual."""
        transport = self.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        assert transport is not None and sock is not None and landing.sums is not None
        try:
            landing.receiving, done = receiver.start(
                sock.fileno(), landing.spans, landing.filled, landing.sums.lengths)
        except (OSError, ValueError) as exc:  # no descriptor to spare, lengths that don't add
            log.info("http.landing_on_loop", reason=repr(exc))
            landing.received_off_loop(None)
            return
        transport.pause_reading()
        done.add_done_callback(lambda f: self._received_off_loop(landing, f))

    def _received_off_loop(self, landing: BodyLanding, done: asyncio.Future[Received]) -> None:
        got = None if done.cancelled() or done.exception() is not None else done.result()
        if got is None and not done.cancelled():
            log.warning("http.landing_receive_failed", error=repr(done.exception()))
        landing.received_off_loop(got)
        transport = self.transport
        if self._take is not landing or transport is None or transport.is_closing():
            return  # the connection was lost meanwhile
        if landing.remaining == 0:
            self._end_landing()
        transport.resume_reading()  # the rest, or the connection's end or error, as usual

    def _end_landing(self) -> None:
        take, transport = self._take, self.transport
        assert take is not None and transport is not None
        transport.set_protocol(self)
        self._end_take(take, b"")

    def data_received(self, data: bytes) -> None:
        take = self._take
        if take is None:
            super().data_received(data)
            return
        rest = take.feed(data)
        if take.remaining == 0:
            self._end_take(take, rest)

    def _end_take(self, take: BodyTake, rest: bytes) -> None:
        """The body is in: the request's stream is at its end, and a new parser reads what
        follows (the old one is still in the body it did not see)."""
        self._take = None
        take.content.feed_eof()
        self._parser = RequestParser(self, self._loop, self._read_bufsize,
                                     **self._parser_args)
        if rest:
            super().data_received(rest)

    def stop_lingering(self) -> None:
        """Answers from now on close the connection at once when their request's body was not
        read, instead of reading and dropping it (aiohttp's lingering close, up to 10 s):
        while the gateway stops, a request answered 503 would hold its shutdown that long."""
        self._lingering_time = 0.0

    def connection_lost(self, exc: BaseException | None) -> None:
        take, self._take = self._take, None
        if take is not None:
            take.fail(exc or ConnectionResetError("the connection closed inside the body"))
        super().connection_lost(exc)

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


#: makes a connection's first protocol (the plain lane) from the maker of aiohttp's handler
LaneFactory = Callable[[Callable[[], asyncio.Protocol]], "Lane"]


class Lane(asyncio.BaseProtocol):
    """What the front's server needs of a connection's first protocol (plainlane.PlainLane)."""

    def close(self) -> None:
        """Close the connection unless a request on it is being answered."""
        raise NotImplementedError

    def abort(self) -> None:
        """Close the connection now, whatever is under way on it."""
        raise NotImplementedError


class S3Server(web.Server):
    """aiohttp's low-level server making :class:`S3RequestHandler` connections, for the
    application of ``base`` (its request handler and factory: middlewares, routes, limits);
    with ``lane``, each connection starts in the lane it makes (given the maker of the handler
    the lane hands the connection to), and the server closes the lanes it made on shutdown."""

    def __init__(self, base: web.Server, *, lane: LaneFactory | None = None,
                 **kwargs: Any) -> None:
        super().__init__(base.request_handler, request_factory=base.request_factory,
                         handler_cancellation=base.handler_cancellation, **kwargs)
        self._lane = lane
        self._lanes: weakref.WeakSet[Lane] = weakref.WeakSet()

    def handler(self) -> RequestHandler:
        return S3RequestHandler(self, loop=self._loop, **self._kwargs)

    # asyncio asks a protocol factory for any protocol; aiohttp's annotation names its own
    def __call__(self) -> RequestHandler | Lane:  # type: ignore[override]
        if self._lane is None:
            return self.handler()
        lane = self._lane(self.handler)
        self._lanes.add(lane)
        return lane

    def pre_shutdown(self) -> None:
        for lane in list(self._lanes):
            lane.close()
        super().pre_shutdown()

    def stop_lingering(self) -> None:
        """:meth:`S3RequestHandler.stop_lingering` on every connection, now and to come."""
        self._kwargs["lingering_time"] = 0.0
        for conn in self.connections:
            if isinstance(conn, S3RequestHandler):
                conn.stop_lingering()

    def cut(self) -> None:
        """Close every connection now, requests in flight on it included (what they had not
        answered is never answered): the end of a shutdown's wait for them."""
        for lane in list(self._lanes):
            lane.abort()
        for conn in self.connections:
            conn.force_close()


def front_runner(app_runner: web.AppRunner, *, shutdown_timeout: float,
                 lane: LaneFactory | None = None, **handler_args: Any) -> web.ServerRunner:
    """The runner to serve ``app_runner``'s application through (after its ``setup()``):
    the app runner keeps the application's start-up and clean-up, this one the connections.
    ``lane``: each connection's first protocol (see :class:`S3Server`). ``handler_args``:
    aiohttp's per-connection settings (``access_log``, ``auto_decompress``)."""
    base = app_runner.server
    if base is None:
        raise RuntimeError("front_runner() before the app runner's setup()")
    return web.ServerRunner(S3Server(base, lane=lane, **handler_args), handle_signals=False,
                            shutdown_timeout=shutdown_timeout)
