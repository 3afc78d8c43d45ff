"""What the native client moves bytes with: a block's body in a batch-get stream, a framed
batch-put body sent buffer by buffer, the rounds of a batch put that honours push-back, and the
translation of the gateway's error answers into s3kv.errors."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import aiohttp

from s3kv.errors import Backpressure, InvalidInput, NamespaceNotFound, RequestError, TooLarge
from s3kv.frames import FRAMES, STORED_HEADER, frames_head
from s3kv.wire.body import slices

#: a block to put: one buffer, or several sent back to back (a header and a payload)
BlockData = bytes | memoryview | tuple[bytes | memoryview, ...]


#: keys per native request (the gateway's limit)
MAX_KEYS = 4096
#: connections per gateway that batch puts leave to lookups and the other small requests
LOOKUP_RESERVE = 2


def block_size(data: BlockData) -> int:
    return sum(map(len, data)) if isinstance(data, tuple) else len(data)


def request_parts(idx: Sequence[int], size_of: Callable[[int], int], max_bytes: int,
                  max_keys: int = MAX_KEYS) -> list[list[int]]:
    """``idx`` cut, in order, into requests of at most ``max_keys`` keys and ``max_bytes``
    (a block larger than that goes alone)."""
    parts: list[list[int]] = []
    cur: list[int] = []
    cur_bytes = 0
    for i in idx:
        n = size_of(i)
        if cur and (cur_bytes + n > max_bytes or len(cur) >= max_keys):
            parts.append(cur)
            cur, cur_bytes = [], 0
        cur.append(i)
        cur_bytes += n
    if cur:
        parts.append(cur)
    return parts


def framed_parts(items: Sequence[tuple[str, BlockData]]) -> list[bytes | memoryview]:
    """The buffers of a framed batch-put body (docs/api.md), none of them copied."""
    parts: list[bytes | memoryview] = []
    sizes: list[tuple[str, int]] = []
    for key, data in items:
        pieces = data if isinstance(data, tuple) else (data,)
        sizes.append((key, sum(map(len, pieces))))
        parts.extend(pieces)
    return [frames_head(sizes), *parts]

#: the largest piece copied from the response stream into a caller's buffer at a time
_PIECE = 1 << 20


class ByteSource(Protocol):
    """What a block's bytes are read from: a batch-get response's stream, or a direct read's
    block as it arrives (client_direct.py)."""

    async def readexactly(self, n: int) -> bytes: ...

    async def read(self, n: int) -> bytes | memoryview: ...


class BlockBody:
    """The bytes of one block in a batch-get stream (or a direct read): read them once, in
    order."""

    def __init__(self, stream: ByteSource, length: int) -> None:
        self.length = length
        self.remaining = length
        self._stream = stream

    async def readexactly(self, n: int) -> bytes:
        if n > self.remaining:
            raise ValueError(f"asked for {n} bytes, {self.remaining} left in the block")
        self.remaining -= n
        return await self._stream.readexactly(n)

    async def readinto(self, buf: memoryview) -> None:
        """Fill ``buf`` (at most what is left) straight from the stream's pieces."""
        if len(buf) > self.remaining:
            raise ValueError(f"buffer of {len(buf)} bytes, {self.remaining} left in the block")
        pos = 0
        while pos < len(buf):
            piece = await self._stream.read(min(_PIECE, len(buf) - pos))
            if not piece:
                raise asyncio.IncompleteReadError(b"", len(buf) - pos)
            buf[pos:pos + len(piece)] = piece
            pos += len(piece)
        self.remaining -= len(buf)

    async def drain(self) -> None:
        while self.remaining:
            await self.readexactly(min(_PIECE, self.remaining))


#: called for each requested key as its record arrives: (position in the request, the block's
#: body, or None for a miss). Reading the body is optional: what is left is skipped after it.
Sink = Callable[[int, BlockBody | None], Awaitable[None]]


class PutRounds:
    """What a put_each still has to send: blocks pushed back (resent after Retry-After until
    the deadline) and blocks whose gateway was unreachable (sent once to their next choice)."""

    def __init__(self, items: list[tuple[str, BlockData]], within: float | None
                 ) -> None:
        self.items = items
        self.stored = [False] * len(items)
        self.deadline = None if within is None else time.monotonic() + within
        self.pending = list(range(len(items)))
        self._failed_over: set[int] = set()
        self._retry: list[int] = []
        self._waits: list[float] = []

    def push_back(self, idx: list[int], retry_after: float) -> None:
        self._retry.extend(idx)
        self._waits.append(retry_after)

    def fail_over(self, idx: list[int]) -> bool:
        again = [i for i in idx if i not in self._failed_over]
        self._failed_over.update(again)
        self._retry.extend(again)
        return bool(again)

    async def next_round(self) -> bool:
        """Wait as the gateways asked; False when nothing is left or the time is up."""
        self.pending, self._retry = sorted(self._retry), []
        waits, self._waits = self._waits, []
        if not self.pending:
            return False
        if waits:
            left = (self.deadline or 0.0) - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(max(waits), left))
        return True


class FramedPayload(aiohttp.payload.Payload):
    """A request body of several buffers sent one after another, never joined into one."""

    def __init__(self, parts: list[bytes | memoryview]) -> None:
        super().__init__(parts, content_type=FRAMES)
        self._parts = parts
        self._size = sum(map(len, parts))  # the base class's Content-Length

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        raise TypeError("a framed batch-put body is binary")

    async def write(self, writer: Any) -> None:
        # in views of at most SLICE bytes: what one write() cannot send at once the transport
        # copies into a buffer of its own (a whole 32 MiB block, less what the socket took)
        for piece in slices(self._parts):
            await writer.write(piece)


async def together(jobs: list[Awaitable[None]]) -> None:
    """Run ``jobs`` together; the first error cancels the others (awaited, so none is left
    running or unretrieved) and is raised."""
    tasks = [asyncio.ensure_future(j) for j in jobs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def whole(body: BlockBody) -> bytes:
    """A block's bytes, received straight into one buffer (then made bytes)."""
    buf = bytearray(body.length)
    await body.readinto(memoryview(buf))
    return bytes(buf)


async def pulled(fetch: Callable[[Sink], Awaitable[object]]
                 ) -> AsyncGenerator[tuple[int, bytes | None], None]:
    """The blocks a fetch hands its sink (``fetch(sink)``: (position, bytes or None)) as an
    async iterator, in the order the sink is called. What is held stays within a few blocks
    (the one the reader has, one queued, the one being received): the fetch's sink waits for
    the iterator's reader, and its stream for the sink. Ends when the fetch does, with its
    error; a reader that stops early (or is cancelled) cancels it."""
    box: asyncio.Queue[tuple[int, bytes | None]] = asyncio.Queue(maxsize=1)

    async def sink(i: int, body: BlockBody | None) -> None:
        await box.put((i, None if body is None else await whole(body)))

    task = asyncio.ensure_future(fetch(sink))
    item: asyncio.Future[tuple[int, bytes | None]] | None = None
    try:
        while True:
            item = asyncio.ensure_future(box.get())
            await asyncio.wait((item, task), return_when=asyncio.FIRST_COMPLETED)
            if not item.done():  # the fetch ended: what it queued last, then its end
                item.cancel()
                while not box.empty():
                    yield box.get_nowait()
                task.result()
                return
            yield item.result()
    finally:
        for pending in (task, item):
            if pending is not None:
                pending.cancel()
        await asyncio.gather(*(t for t in (task, item) if t is not None),
                             return_exceptions=True)


def _number(value: str | None, default: float) -> float:
    """A header's number; ``default`` when it is absent or not a number."""
    try:
        return float(value) if value else default
    except ValueError:
        return default


def _json_object(body: bytes) -> dict[str, Any] | None:
    """``body`` as a JSON object; None if it is none (not JSON, or JSON of another kind)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def answer_doc(gateway: str, body: bytes) -> dict[str, Any]:
    """A gateway's JSON answer, an object; RequestError (MalformedResponse, 502) for anything
    else (a proxy's or another service's page, a cut answer)."""
    doc = _json_object(body)
    if doc is None:
        raise RequestError("MalformedResponse", f"gateway {gateway} answered no JSON object: "
                           f"{body[:80]!r}", 502)
    return doc


def answer(gateway: str, body: bytes, name: str, kind: type, *, items: type | None = None,
           count: int | None = None) -> Any:
    """The field ``name`` of a gateway's JSON answer: a ``kind`` (a list: of ``count``
    ``items``); RequestError (MalformedResponse, 502) when it is not."""
    value = answer_doc(gateway, body).get(name)
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if ok and isinstance(value, list):
        ok = (count is None or len(value) == count) and \
            (items is None or all(isinstance(v, items) for v in value))
    if not ok:
        raise RequestError("MalformedResponse", f"gateway {gateway} answered {name!r} "
                           f"not as expected: {body[:80]!r}", 502)
    return value


def error_from_response(status: int, body: bytes, headers: Mapping[str, str]) -> Exception:
    doc = _json_object(body)  # a proxy's error page, say, is no JSON object
    if doc is not None:
        code, message = str(doc.get("error", "")), str(doc.get("message", ""))
    else:
        code, message = "", body[:200].decode(errors="replace")
    if code == "SlowDown" or status == 503:
        return Backpressure(message or "gateway busy", _number(headers.get("Retry-After"), 1.0),
                            int(_number(headers.get(STORED_HEADER), 0)))
    if code == "NoSuchBucket":
        return NamespaceNotFound(message)
    if code == "EntityTooLarge":
        return TooLarge(message)
    if status == 400 and code == "InvalidArgument":
        return InvalidInput(message)
    return RequestError(code or "HTTPError", message, status)
