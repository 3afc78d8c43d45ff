"""The plain lane: a connection's plain object PUTs and GETs served below aiohttp's request
machinery; the connection goes to aiohttp's handler at the first request that is not plain.

Every S3 connection starts here (:class:`PlainLane`, made by the front's server,
protocol.py). The lane reads a request's head into its own buffer; when plainops.py says the
request is plain (and has checked what the S3 handlers check before a body: signature,
namespace, key, size, budget), the lane receives the body straight into its room in the open
segment where the backend lends one and 64 KiB or more of it is still to come (the file
backend: a window onto the segment's file, store/landing.py, as PutObject's large bodies
land), else into one buffer; it stores it (``BlockStore.landed`` or ``put``, under the key's
lock, as PutObject does) or sends the object (its views, with ``os.writev``, as GetObject
does), and answers with the S3 handlers' headers. Its requests are counted in the gateway's
state and metrics as theirs are.

What needs no wait is done from the protocol's callbacks, with no task: taking a body's room
when the open segment has it and the backend lends the window at once, committing a landed
body for a key whose lock no one holds, and answering a GET of a missing object or of one at
hand (``BlockStore.read_now``). The rest (a room to wait for, an append, a read from the
backend) runs in a task, reading paused meanwhile. A 256 KiB PUT through aiohttp's request,
the middleware and the generic body reader cost the event loop twice what the lane's first
form did (docs/performance-log.md, issue 17, session 36); landing bodies and answering at once
took another third off (session 37).

At the first request that is not plain (or a GET of an object whose stored attributes cannot
go into a head as they are), the lane hands the connection to a fresh :class:`S3RequestHandler`
(``transport.set_protocol``, ``connection_made``, then that request's bytes and all after it as
received) and is done: the rest of the connection is aiohttp's. Nothing of that request was
answered by the lane, so its answer, an error included, is the handlers' own.

One request at a time: what a client pipelined behind a request waits in the lane's buffer
(reading is paused while a task stores or sends, or while the transport holds an answer above
its limit). A body that stops arriving for ``BODY_IDLE_TIMEOUT`` seconds closes the connection
(its reservation and room given back), so does an answer the client takes none of
(uptake.py) for ``chunked.SEND_IDLE_TIMEOUT`` seconds, and a connection idle between requests
for the ``idle_timeout`` setting's seconds is closed, as aiohttp's handler does with the same
setting (checked by one timer per connection).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from s3kv.gateway import headbufs
from s3kv.gateway.app import CLIENT_CLOSED
from s3kv.gateway.bodies import BODY_IDLE_TIMEOUT, CONTINUE
from s3kv.gateway.chunked import SEND_IDLE_TIMEOUT, send_vectors, vector_groups
from s3kv.gateway.plainops import (
    Plain,
    get_now,
    land,
    land_now,
    lands,
    plain_request,
    put_now,
    read_get,
    release,
    store_put,
)
from s3kv.gateway.protocol import Lane
from s3kv.gateway.state import GatewayState
from s3kv.gateway.uptake import Uptake
from s3kv.log import get_logger
from s3kv.store.landing import Landing
from s3kv.wire.body import SLICE, Buffer

log = get_logger(__name__)

#: seconds between the checks of a connection's one timer (none is made per request)
TICK = BODY_IDLE_TIMEOUT / 4
_END = b"\r\n\r\n"


class PlainLane(asyncio.BufferedProtocol, Lane):
    """One connection, until its first request that is not plain (see the module)."""

    def __init__(self, st: GatewayState, handler: Callable[[], asyncio.Protocol]) -> None:
        self._st = st
        self._handler = handler
        self._transport: asyncio.Transport | None = None
        self._fd = -1  # the socket's
        self._head = headbufs.NO_HEAD  # a buffer while a request is read or served
        self._n = 0  # bytes in _head
        self._used = 0  # bytes of _head the current request took (its head, its body's start)
        self._plain: Plain | None = None
        self._body: memoryview | None = None  # of the buffer or window the body goes into
        self._landing: Landing | None = None  # the body's room in its segment, if it lands
        self._got = 0  # bytes of _body received
        self._busy = False  # a request is being stored or answered
        self._gone = False
        self._timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0  # loop time the last request ended (or the connection began)
        self._seen = 0  # _got at the last tick
        self._stalled = 0.0  # seconds the body has not moved, as the ticks saw it
        self._uptake: Uptake | None = None  # what the client takes of its answers
        self._send_stalled = 0.0  # seconds the client took none of one, as the ticks saw it
        self._drained: asyncio.Future[None] | None = None

    # -- asyncio's protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is None or transport.get_extra_info("sslcontext") is not None:
            self._hand_off()  # not a plain TCP socket: aiohttp's from the start
            return
        self._fd = sock.fileno()
        self._uptake = Uptake(transport)
        loop = asyncio.get_running_loop()
        self._idle_since = loop.time()
        self._timer = loop.call_later(TICK, self._tick)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return self._body[self._got:]
        if not self._head:
            self._head = headbufs.take()
        return memoryview(self._head)[self._n:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is not None:
            self._got += nbytes
            if self._got == len(self._body):
                self._start()
            return
        self._n += nbytes
        self._next()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone = True
        self._stop_timer()
        if self._plain is not None and not self._busy:  # cut off inside the body
            self._forget()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def close(self) -> None:
        transport = self._transport
        if not (self._busy or self._gone) and transport is not None:
            transport.close()

    def abort(self) -> None:
        transport = self._transport
        if not self._gone and transport is not None:
            transport.abort()

    # -- requests ----------------------------------------------------------------------------

    def _next(self) -> None:
        """Take the next request in the buffer, if its head is complete."""
        end = self._head.find(_END, 0, self._n)
        if end < 0:
            if self._n == len(self._head):
                self._hand_off()
            return
        plain = plain_request(self._st, bytes(self._head[:end]))
        if plain is None:
            self._hand_off()
            return
        self._plain = plain
        self._st.enter()  # in flight from its head on, as the S3 handlers count it
        start = self._used = end + len(_END)
        if plain.method == "GET":
            self._start()
            return
        if plain.expect and self._transport is not None:
            self._transport.write(CONTINUE)
        got = min(self._n - start, plain.length)
        if lands(self._st, plain, got) and self._transport is not None:
            landing = self._landing = land_now(self._st, plain)
            if landing is not None:
                self._receive(landing.spans()[0], start, got)
                return
            self._busy = True  # reading paused until the body has its room
            self._transport.pause_reading()
            asyncio.get_running_loop().create_task(self._land(plain, start, got))
            return
        self._receive(bytearray(plain.length), start, got)

    async def _land(self, plain: Plain, start: int, got: int) -> None:
        """Receive the body straight into its room in the segment, if the store lends one."""
        try:
            landing = await land(self._st, plain)
        except Exception as exc:
            self._failed(plain, exc)
            landing = None
        self._busy, self._landing = False, landing
        transport = self._transport
        if self._gone or transport is None or transport.is_closing():
            self._forget()
            return
        transport.resume_reading()
        self._receive(bytearray(plain.length) if landing is None else landing.spans()[0],
                      start, got)

    def _receive(self, body: bytearray | memoryview, start: int, got: int) -> None:
        """The body goes into ``body``: its first ``got`` bytes from the buffer at ``start``."""
        view = self._body = memoryview(body)
        view[:got] = self._head[start:start + got]
        self._got = got
        self._used += got
        self._stalled = 0.0
        if got == len(view):
            self._start()

    def _forget(self) -> None:
        """The request ends unanswered (its client is gone): what it holds is given back."""
        assert self._plain is not None
        if self._landing is not None:
            self._landing.abandon()
        release(self._st, self._plain)
        self._st.leave()
        self._plain = self._body = self._landing = None

    def _start(self) -> None:
        """Answer the request: at once if nothing in it needs a wait, else in a task."""
        if self._answer_now():
            return
        transport = self._transport
        assert transport is not None
        self._busy = True
        transport.pause_reading()
        asyncio.get_running_loop().create_task(self._serve())

    def _answer_now(self) -> bool:
        """The request answered from here (no task, reading not paused) if it needs no wait:
        a PUT landed for a key no one holds, a GET of a missing object or of one at hand no
        larger than one ``writev`` (``SLICE``); whether it was."""
        plain, body, st, transport = self._plain, self._body, self._st, self._transport
        assert plain is not None and transport is not None
        started = time.perf_counter()
        queued = False
        try:
            got = (get_now(st, plain, SLICE) if body is None
                   else put_now(st, plain, body, self._landing))
            if got is None:
                return False
            status, bufs = got
            queued = send_vectors(transport, self._fd, bufs)
        except Exception as exc:
            status = self._failed(plain, exc)
        self._end(plain, plain.op, status, started)
        if queued and self._drained is not None:  # over the transport's limit: on once drained
            self._busy = True
            transport.pause_reading()
            self._drained.add_done_callback(lambda _: self._done())
        else:
            self._done()
        return True

    async def _serve(self) -> None:
        plain, body = self._plain, self._body
        assert plain is not None
        st = self._st
        started = time.perf_counter()
        op, status = plain.op, 200
        try:
            if body is not None:
                status, answer = await store_put(st, plain, body, self._landing)
                await self._send(answer)
            else:
                got = await read_get(st, plain)
                if got is None:  # the S3 handlers answer it
                    op = ""
                    self._hand_off()
                    return
                status, bufs = got
                await self._send(bufs)
        except Exception as exc:
            status = self._failed(plain, exc)
        finally:
            self._end(plain, op, status, started)
        self._done()

    def _failed(self, plain: Plain, exc: Exception) -> int:
        """The status a request that raised ``exc`` is counted under: the client went away
        while it was answered, or a fault (logged, the connection closed). Called in the
        ``except`` that caught it."""
        if isinstance(exc, ConnectionError):
            return CLIENT_CLOSED
        log.exception("http.unhandled", method=plain.method, path=plain.path, lane="plain")
        if self._transport is not None:
            self._transport.close()
        return 500

    def _end(self, plain: Plain, op: str, status: int, started: float) -> None:
        """What the request held is given back, and it is counted (under ``op``, if any)."""
        if self._landing is not None:  # given up, unless committed
            self._landing.abandon()
        release(self._st, plain)
        self._st.leave()
        if op:
            self._st.metrics.observe(op, status, time.perf_counter() - started)
            self._st.metrics.plain_lane.inc(1)

    def _done(self) -> None:
        """The request is answered: on to what follows it in the buffer, or read again."""
        self._plain, self._body, self._landing, self._busy = None, None, None, False
        self._send_stalled = 0.0
        transport = self._transport
        if self._gone or transport is None or transport.is_closing():
            return
        used, rest = self._used, self._n - self._used
        self._head[:rest] = self._head[used:self._n]
        self._n = rest
        if not rest:  # nothing more of the client's: the buffer waits for the next request
            self._head = headbufs.give(self._head)
        transport.resume_reading()
        self._idle_since = asyncio.get_running_loop().time()
        if rest:
            self._next()

    async def _send(self, bufs: list[Buffer]) -> None:
        """``bufs`` in order, as GetObject's body goes (chunked.py: a group of at most SLICE
        bytes at a time, straight to the socket while the transport holds nothing), the
        transport let drain below its limit before the next group."""
        transport = self._transport
        for group, _ in vector_groups(bufs):
            if self._gone or transport is None:
                raise ConnectionResetError("the client closed the connection")
            if send_vectors(transport, self._fd, group) and self._drained is not None:
                await self._drained

    # -- the hand-over and the timers -------------------------------------------------------

    def _hand_off(self) -> None:
        """The connection is aiohttp's from here: it gets what the lane holds of it."""
        transport = self._transport
        self._stop_timer()
        if transport is None or self._gone or transport.is_closing():
            return
        pending = bytes(self._head[:self._n])
        self._n = 0
        self._gone = True  # this lane is done with the connection
        handler = self._handler()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if pending:
            handler.data_received(pending)
        if self._busy:
            self._busy = False
            transport.resume_reading()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        """Every TICK seconds: close the connection if its body has not moved for
        ``BODY_IDLE_TIMEOUT`` seconds, its answer for ``SEND_IDLE_TIMEOUT``, or if it has been
        idle between requests for ``idle_timeout`` seconds (what aiohttp's timers do, without a
        timer made and cancelled for each request)."""
        loop = asyncio.get_running_loop()
        self._timer = None
        transport = self._transport
        if self._gone or transport is None:
            return
        if self._busy:  # stored or answered: whoever ends it makes it idle again
            took = self._uptake is None or self._uptake.took()  # of an answer waiting on it
            self._send_stalled = 0.0 if took else self._send_stalled + TICK
            if self._send_stalled >= SEND_IDLE_TIMEOUT:
                transport.abort()
                return
        elif self._body is not None:  # receiving a body
            self._stalled = self._stalled + TICK if self._got == self._seen else 0.0
            self._seen = self._got
            if self._stalled >= BODY_IDLE_TIMEOUT:
                transport.close()
                return
        elif loop.time() - self._idle_since >= self._st.settings.idle_timeout:
            transport.close()
            return
        self._timer = loop.call_later(TICK, self._tick)
