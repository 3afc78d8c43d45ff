"""A lean HTTP/1.1 client for the hot paths: GET bodies received straight into reused buffers
(asyncio BufferedProtocol), hashed, dropped; PUT bodies sent as the caller's buffers.

aiohttp hands a response body over as a new ``bytes`` object per socket read; for GETs, the
hot path of a read benchmark, this module avoids that: each connection owns one receive buffer,
the kernel writes the body into it (``recv_into``), the bytes are hashed in place and the
buffer is reused for the next read. Nothing is allocated per chunk and no body is ever kept.

Only what a GET or a PUT needs of HTTP/1.1: one request at a time per keep-alive connection,
request bodies sent with their Content-Length (views written as the transport takes them, no
join), response bodies delimited by Content-Length (S3 servers answer with it) or chunked (a
gateway's batch-get stream, an error's body; the framing taken off by s3kv.wire.dechunk on the
way, whatever the body goes to), and one with neither is read to the end of the connection. An
error's body (a status the sink does not take) is kept in the response, its first
``ERROR_BODY_LIMIT`` bytes; the rest is read and dropped, so the connection stays usable. A PUT
through here costs the client a fraction of an aiohttp request's CPU.

A sink that is also a :class:`~s3kv.wire.landing.Landing` offers the memory the next body bytes
belong in (the S3 backend's ranged reads and the client's direct reads: the block being read),
and the kernel receives them straight into it: no copy out of the connection's buffer. Bytes it
has no place for (a gap between blocks, the end of the head's read) go through the sink as
before. While a large body of a known length has ``RCV_LOWAT`` or more to come, its plain TCP
socket wakes the loop only once that much is in (fewer, larger receives). A chunked body's
framing is taken off on the way (s3kv.wire.dechunk). A ValueError from a sink ends the
exchange with it (the connection is closed).

Used by warp's S3 client for its GETs and PUTs, by the S3 backend's ranged reads
(:mod:`s3kv.backends.ranged`) and by the native client's reads (direct and batch get).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from s3kv.clock import now_ns
from s3kv.wire.body import Buffer
from s3kv.wire.dechunk import ChunkError, Dechunker
from s3kv.wire.landing import Landing, Sink, landing_of, paced

RECV_BUFFER = 1 << 20
#: a body of a known length with 4x this much or more to come: until less than 2x is left, its
#: socket wakes the loop only once this much is in (SO_RCVLOWAT): fewer, larger receives. A
#: direct read of 32 MiB chunks from RGW cost the client 0.29-0.30 CPU-s per GiB with it
#: against 0.32-0.36 without; warp's 32 MiB GETs 18-25 % less (docs/performance-log.md, session 50)
RCV_LOWAT = 1 << 20
HEAD_LIMIT = 64 << 10
ERROR_BODY_LIMIT = 64 << 10


class ProtocolError(Exception):
    pass


class BadChunking(ProtocolError, ValueError):
    """A chunked body's framing is malformed (a ProtocolError to callers that read S3, a
    ValueError, as a malformed body, to those that parse what it carries)."""


@dataclass
class Response:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    first_byte_ns: int = 0
    size: int = 0  # the body's bytes (a chunked body's data, its framing aside)
    error_body: bytes = b""
    keep_alive: bool = True


class _GetProtocol(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self._body_buf = memoryview(bytearray(RECV_BUFFER))
        self._head = bytearray(HEAD_LIMIT)
        self._head_len = 0
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Response] | None = None
        self._resp = Response()
        self._sink: Sink | None = None
        self._landing: Landing | None = None
        self._landed = False  # the last get_buffer handed out the landing's memory
        self._sink_statuses: frozenset[int] | None = None
        self._left = -1  # body bytes still expected; -1: until the connection closes
        self._lowat = 1  # the socket's SO_RCVLOWAT
        self._in_head = True
        self._chunked = False
        self._dechunk: Dechunker | None = None  # a chunked body's framing, taken off
        self._exchange = 0  # counts exchanges begun and ended: a paced sink's pause is its own
        self.closed = False
        #: set while the transport's buffer is full (pause_writing), until it drains
        self._writable: asyncio.Future[None] | None = None

    @property
    def started(self) -> bool:
        """Whether any byte of the current response arrived."""
        return bool(self._resp.first_byte_ns)

    # ---- one exchange ---------------------------------------------------------------------
    def begin(self, request: bytes, sink: Sink,
              sink_statuses: frozenset[int] | None = None) -> asyncio.Future[Response]:
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._resp, self._sink, self._sink_statuses = Response(), sink, sink_statuses
        self._landing = landing_of(sink)
        self._head_len, self._in_head, self._left, self._chunked = 0, True, -1, False
        self._dechunk = None
        self._exchange += 1
        pacer = paced(sink)
        if pacer is not None:
            ex = self._exchange
            pacer.pace(functools.partial(self._pace, ex, True),
                       functools.partial(self._pace, ex, False))
        self.transport.write(request)
        return self._waiter

    async def send_body(self, body: Sequence[Buffer]) -> bool:
        """Write the request's body after its head, as fast as the transport drains; stops
        early when the response has come (a server may refuse before reading a body). False:
        it stopped early, and the connection must not carry another request."""
        assert self.transport is not None and self._waiter is not None
        for piece in body:
            if self._waiter.done() or self.transport.is_closing():
                return False
            self.transport.write(piece)
            if self._writable is not None:
                await self._writable
        return True

    # ---- asyncio callbacks ----------------------------------------------------------------
    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._release_writer()

    def _release_writer(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._in_head:
            return memoryview(self._head)[self._head_len:]
        self._landed = False
        if self._landing is not None and (self._left > 0 or self._dechunk is not None):
            space = self._landing.space()
            if space is not None and len(space):
                self._landed = True
                return space[:self._left] if self._left > 0 else space
        return self._body_buf

    def buffer_updated(self, nbytes: int) -> None:
        if self._waiter is None or self._waiter.done():
            self._fail(ProtocolError("unexpected data"))
            return
        if self._in_head:
            if not self._resp.first_byte_ns:
                self._resp.first_byte_ns = now_ns()
            self._head_len += nbytes
            end = self._head.find(b"\r\n\r\n", 0, self._head_len)
            if end < 0:
                if self._head_len >= HEAD_LIMIT:
                    self._fail(ProtocolError("response head too large"))
                return
            try:
                self._parse_head(bytes(self._head[:end]))
            except (ValueError, IndexError) as exc:
                self._fail(ProtocolError(f"bad response head: {exc}"))
                return
            self._in_head = False
            if self._sink is not None and self._left >= 4 * RCV_LOWAT and self.transport \
                    is not None and self.transport.get_extra_info("ssl_object") is None:
                self._set_lowat(RCV_LOWAT)  # (TLS: the socket's bytes are records, not these)
            rest = memoryview(self._head)[end + 4:self._head_len]
            if len(rest):
                self._feed(rest)
            elif self._left == 0:
                self._finish()
            return
        if self._landed:
            self._landed = False
            if self._left > 0:
                self._left -= nbytes
                self._lower_lowat()
            self._resp.size += nbytes
            assert self._landing is not None
            try:
                self._landing.landed(nbytes)
            except ValueError as exc:  # a body its landing finds malformed
                self._fail(_malformed(exc))
                return
            if self._left == 0 or (self._dechunk is not None and self._dechunk.done):
                self._finish()
            return
        self._feed(self._body_buf[:nbytes])

    def _set_lowat(self, n: int) -> None:
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        try:
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)
                self._lowat = n
        except OSError:  # not a socket that takes it: every read wakes the loop, as before
            pass

    def _lower_lowat(self) -> None:
        """Back to waking at every byte before what is left of the body could fall below the
        mark (it would never wake the loop: the sender has no more to send)."""
        if self._lowat > 1 and self._left < 2 * self._lowat:
            self._set_lowat(1)

    def _ends_at_close(self) -> bool:
        return self._left < 0 and not self._in_head and self._dechunk is None

    def eof_received(self) -> bool | None:
        if self._ends_at_close():
            self._resp.keep_alive = False
            self._finish()
        else:
            self._fail(ConnectionResetError("connection closed mid-response"))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release_writer()
        if self._ends_at_close() and exc is None:
            self._resp.keep_alive = False
            self._finish()
        self._fail(exc or ConnectionResetError("connection lost"))

    # ---- parsing --------------------------------------------------------------------------
    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        self._resp.status = int(lines[0].split(" ", 2)[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self._resp.headers[name.strip().lower()] = value.strip()
        h = self._resp.headers
        if h.get("connection", "").lower() == "close":
            self._resp.keep_alive = False
        if not self._to_sink():  # an error's body: kept in the response
            self._sink = self._landing = None
        if "content-length" in h:
            self._left = int(h["content-length"])
        else:
            self._chunked = "chunked" in h.get("transfer-encoding", "").lower()
            if not self._chunked:
                self._resp.keep_alive = False  # read to the end of the connection
            else:  # its data lands in place where the sink is a landing
                self._dechunk = Dechunker(self._keep_error if self._sink is None else self._sink)
                self._landing = self._sink = self._dechunk

    def _feed(self, data: memoryview) -> None:
        try:
            self._body(data)
        except ValueError as exc:  # a body its sink finds malformed
            self._fail(_malformed(exc))

    def _body(self, data: memoryview) -> None:
        r = self._resp
        if self._left >= 0:
            data = data[:self._left]
            self._left -= len(data)
            self._lower_lowat()
        r.size += len(data)
        if self._sink is not None:
            self._sink(data)
        else:
            self._keep_error(data)
        if self._left == 0 or (self._dechunk is not None and self._dechunk.done):
            self._finish()

    def _keep_error(self, data: memoryview) -> None:
        """An error's body: its first ERROR_BODY_LIMIT bytes kept, the rest dropped."""
        room = ERROR_BODY_LIMIT - len(self._resp.error_body)
        if room > 0:
            self._resp.error_body += bytes(data[:room])

    def _to_sink(self) -> bool:
        """Whether this response's body goes to the sink (else: it is an error's)."""
        status = self._resp.status
        return status < 300 if self._sink_statuses is None else status in self._sink_statuses

    def _pace(self, exchange: int, pause: bool) -> None:
        """A paced sink pauses or resumes reading: only while its exchange lasts."""
        transport = self.transport
        if exchange == self._exchange and transport is not None and not transport.is_closing():
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _finish(self) -> None:
        self._release_writer()  # an answer before the whole body: the sender stops
        self._exchange += 1  # its sink's pace is over: the connection reads for the next one
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()  # (nothing if it was not paused)
        self._sink = self._landing = None  # an idle connection holds nothing of the exchange
        if self._waiter is not None and not self._waiter.done():
            if self._dechunk is not None:
                self._resp.size = self._dechunk.payload
            self._waiter.set_result(self._resp)

    def _fail(self, exc: BaseException) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


def _malformed(exc: ValueError) -> ValueError:
    """A sink's ValueError as it is; a chunked body's bad framing as :class:`BadChunking`."""
    return BadChunking(f"bad chunked body: {exc}") if isinstance(exc, ChunkError) else exc


class GetPool:
    """Keep-alive connections per endpoint, one exchange at a time on each."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None,
                 connect_timeout: float | None = None) -> None:
        """``ssl_context``: for https endpoints (default: the system's trust store);
        ``connect_timeout``: seconds a new connection may take (TimeoutError past it)."""
        self._idle: dict[str, list[_GetProtocol]] = {}
        self._closed = False
        self._ssl: ssl.SSLContext | None = ssl_context
        self._connect_timeout = connect_timeout

    async def _connect(self, endpoint: str) -> _GetProtocol:
        u = urlsplit(endpoint)
        secure = u.scheme == "https"
        if secure and self._ssl is None:
            self._ssl = ssl.create_default_context()
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            _, proto = await loop.create_connection(
                _GetProtocol, u.hostname or "localhost", u.port or (443 if secure else 80),
                ssl=self._ssl if secure else None)
        return proto

    async def get(self, endpoint: str, target: str, headers: dict[str, str],
                  sink: Sink, sink_statuses: frozenset[int] | None = None) -> Response:
        """Send ``GET target`` with ``headers`` (signed, incl. Host); the body goes to
        ``sink`` if the status is in ``sink_statuses`` (default: any below 300), otherwise to
        ``Response.error_body`` (its first ERROR_BODY_LIMIT bytes)."""
        return await self.send("GET", endpoint, target, headers, (), sink, sink_statuses)

    async def send(self, method: str, endpoint: str, target: str, headers: dict[str, str],
                   body: Sequence[Buffer], sink: Sink,
                   sink_statuses: frozenset[int] | None = None) -> Response:
        """``get`` for any method that is not HEAD, with ``body`` sent after the head, as
        these buffers (``headers`` must give its Content-Length)."""
        idle = self._idle.setdefault(endpoint, [])
        lines = [f"{method} {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        while True:
            proto: _GetProtocol | None = None
            while idle and proto is None:
                candidate = idle.pop()
                proto = None if candidate.closed else candidate
            reused = proto is not None
            if proto is None:
                proto = await self._connect(endpoint)
            try:
                waiter = proto.begin(request, sink, sink_statuses)
                sent = await proto.send_body(body) if body else True
                resp = await waiter
            except (ConnectionError, ProtocolError):
                if proto.transport is not None:
                    proto.transport.close()
                if reused and not proto.started:
                    continue  # the server had closed an idle connection: use a fresh one
                raise
            except BaseException:
                if proto.transport is not None:
                    proto.transport.close()
                raise
            break
        if resp.keep_alive and sent and not proto.closed and not self._closed:
            idle.append(proto)
        elif proto.transport is not None:
            proto.transport.close()
        return resp

    def close(self) -> None:
        """Close the idle connections; one in use closes when its exchange ends."""
        self._closed = True
        for protos in self._idle.values():
            for p in protos:
                if p.transport is not None:
                    p.transport.close()
        self._idle.clear()
