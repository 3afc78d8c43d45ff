"""Reading request bodies within the memory budget, verified before anything is stored.

A body is kept in the pieces it arrived in (no buffer of its size is allocated, zeroed and
filled: for a 32 MiB PUT that was half the gateway's CPU, mostly page faults); the store copies
them into the open segment once. ``Body.data`` joins them for the callers that parse a body.
A large body can instead land where its caller says (``land``: its blocks' places in their
segment, store/landing.py), received there straight from the socket (takeover.py); the caller
may read the body's head first (a native batch put's list of blocks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway.payload import BodyReader, BodyResult
from s3kv.gateway.protocol import S3RequestHandler
from s3kv.gateway.reqkeys import AUTH, EXPECTING
from s3kv.gateway.s3xml_parse import MAX_XML_BYTES
from s3kv.gateway.state import GatewayState
from s3kv.gateway.takeover import BodyLanding, BodyTake, Sums
from s3kv.gateway.watchdog import IdleWatchdog
from s3kv.wire.body import Buffer, joined
from s3kv.wire.headers import HeaderValues, index_headers
from s3kv.wire.landrecv import Receiver
from s3kv.wire.reads import larger_reads

#: a body that delivers no byte for this long is abandoned (its memory reservation freed)
BODY_IDLE_TIMEOUT = 20.0
#: the interim answer to ``Expect: 100-continue``
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass
class Destination:
    """Where a body goes (:data:`Land`): ``head``, its first bytes, which the caller read
    already through the request's stream, then ``spans``, the windows the rest lands in, in
    order (none: the rest is read as usual); ``sums``, if given, the blocks' checksums, fed
    each piece of the spans as it is filled or settled by a receive off the event loop
    (takeover.BodyLanding)."""

    head: list[bytes]
    spans: list[memoryview]
    sums: Sums | None = None


#: asked, given the body's length, where it goes (None: read it as usual)
Land = Callable[[int], Awaitable[Destination | None]]


@dataclass
class Body:
    pieces: list[bytes | memoryview]
    result: BodyResult
    reserved: int
    #: the body was received where ``land`` said (the pieces are views of its windows)
    landed: bool = False
    _joined: Buffer | None = field(default=None, repr=False)

    @property
    def data(self) -> Buffer:
        """The body as one buffer (joined once, on first use; a single piece as it is)."""
        if self._joined is None:
            self._joined = joined(self.pieces)
        return self._joined


async def read_body(request: web.Request, st: GatewayState, limit: int, *,
                    md5: bool = False, crc: bool = False,
                    idle: float = BODY_IDLE_TIMEOUT, heads: HeaderValues | None = None,
                    land: Land | None = None) -> Body:
    """Read and verify the whole body (at most ``limit`` bytes).

    Reserves the declared size (or ``limit``) from the budget first; the caller must call
    ``st.budget.release(body.reserved)`` when done with the data. Raises RequestError
    (EntityTooLarge, IncompleteBody, BadDigest, SlowDown, RequestTimeout: no byte for ``idle``
    seconds, ...) with nothing reserved. ``heads``: the request's headers, if already indexed.
    """
    heads = heads if heads is not None else index_headers(request.headers)
    reader = BodyReader(request.content, heads, request.get(AUTH),
                        max_size=limit, md5=md5, crc=crc)
    declared = reader.declared_size
    reserved = st.budget.reserve(declared if declared is not None else limit)
    take: BodyTake | None = None
    try:
        await invite(request)
        try:
            take = await _take_body(request, reader, heads, land, idle,
                                      None if land is None else st.receiver)
            # one timer for the body, not one per piece (asyncio.timeout's cost per piece)
            # an admitted body: read in large reads, within what was reserved for it
            # (a body not admitted, an idle connection: asyncio's 256 KiB reads)
            with IdleWatchdog(idle) as watchdog, larger_reads(request.transport, reserved):
                pieces = await reader.collect(watchdog.progress)
        except TimeoutError:
            raise RequestError("RequestTimeout", "Your socket connection to the server was "
                               "not read from or written to within the timeout period.",
                               400) from None
        result = await reader.verify()
        st.metrics.bytes_in.inc(result.size)
        if isinstance(take, BodyLanding) and take.off_loop:
            st.metrics.bytes_off_loop.inc(take.off_loop)
        return Body(pieces, result, reserved, isinstance(take, BodyLanding))
    except BaseException:
        if take is not None:  # the rest of the body is read and dropped
            take.drop()
        st.budget.release(reserved)
        raise


async def invite(request: web.Request) -> None:
    """Ask a client that sent ``Expect: 100-continue`` for its body (once it is admitted)."""
    if request.get(EXPECTING):
        request[EXPECTING] = False
        await request.writer.write(CONTINUE)
        request.writer.output_size = 0  # an interim answer: the response is still to come


async def _take_body(request: web.Request, reader: BodyReader, heads: HeaderValues,
                     land: Land | None, idle: float, receiver: Receiver | None
                     ) -> BodyTake | None:
    """An admitted plain body framed by its Content-Length, taken from the socket past
    aiohttp's parser, or landed where ``land`` says (:mod:`s3kv.gateway.takeover`); None:
    read through the parser."""
    handler, length = request.protocol, request.content_length
    if not (reader.plain and isinstance(handler, S3RequestHandler)) or length is None \
            or "transfer-encoding" in heads or not handler.can_take(request.content, length):
        return None
    dest = None
    if land is not None and handler.can_land():
        async with asyncio.timeout(idle):  # it may read the body's head
            dest = await land(length)
    head = dest.head if dest is not None else []
    take: BodyTake | None = None
    if dest is not None and dest.spans:
        crc = reader.landing_crc() if dest.sums is None else None
        take = handler.land_body(request.content, length, dest.spans, head, dest.sums or crc,
                                 receiver)
        if take is not None and crc is not None:
            reader.crc_landed()
    if take is None:
        take = handler.take_body(request.content, length, head)
    if take is not None:
        reader.read_pieces_from(take)
    elif head:  # bytes read that the reader would not see
        raise RequestError("IncompleteBody", "The request body ended before its declared "
                           "length.")
    return take


async def read_small(request: web.Request, st: GatewayState, *,
                     object_checksum: bool = False) -> bytes:
    """A small control body (XML, JSON), verified. ``object_checksum``: the request's
    ``x-amz-checksum-*`` headers name the object's checksum, not the body's (as on
    CompleteMultipartUpload), so they are not checked against the body."""
    heads = index_headers(request.headers)
    if object_checksum:
        heads = {k: v for k, v in heads.items() if not k.startswith(
            ("x-amz-checksum-", "x-amz-sdk-checksum-algorithm"))}
    body = await read_body(request, st, MAX_XML_BYTES, heads=heads)
    try:
        return bytes(body.data)
    finally:
        st.budget.release(body.reserved)
