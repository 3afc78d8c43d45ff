"""Reading request bodies within the memory budget, verified before anything is stored."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway.payload import BodyReader, BodyResult
from s3kv.gateway.s3xml import MAX_XML_BYTES
from s3kv.gateway.state import GatewayState

#: a body that delivers no byte for this long is abandoned (its memory reservation freed)
BODY_IDLE_TIMEOUT = 20.0


@dataclass
class Body:
    data: memoryview
    result: BodyResult
    reserved: int


async def read_body(request: web.Request, st: GatewayState, limit: int, *,
                    md5: bool = False) -> Body:
    """Read and verify the whole body (at most ``limit`` bytes).

    Reserves the declared size (or ``limit``) from the budget first; the caller must call
    ``st.budget.release(body.reserved)`` when done with the data. Raises RequestError
    (EntityTooLarge, IncompleteBody, BadDigest, SlowDown, ...) with nothing reserved.
    """
    reader = BodyReader(request.content, request.headers, request.get("auth"),
                        max_size=limit, md5=md5)
    declared = reader.declared_size
    reserved = st.budget.reserve(declared if declared is not None else limit)
    try:
        buf = bytearray(declared) if declared is not None else bytearray()
        pos = 0
        pieces = aiter(reader)
        while True:
            try:
                async with asyncio.timeout(BODY_IDLE_TIMEOUT):
                    piece = await anext(pieces)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise RequestError("RequestTimeout", "Your socket connection to the server was "
                                   "not read from or written to within the timeout period.",
                                   400) from None
            if declared is not None and pos + len(piece) <= declared:
                buf[pos:pos + len(piece)] = piece
            else:
                del buf[pos:]
                buf += piece
            pos += len(piece)
        result = await reader.verify()
        st.metrics.bytes_in.inc(pos)
        return Body(memoryview(buf)[:pos], result, reserved)
    except BaseException:
        st.budget.release(reserved)
        raise


async def read_small(request: web.Request, st: GatewayState) -> bytes:
    """A small control body (XML, JSON), verified."""
    body = await read_body(request, st, MAX_XML_BYTES)
    try:
        return bytes(body.data)
    finally:
        st.budget.release(body.reserved)
