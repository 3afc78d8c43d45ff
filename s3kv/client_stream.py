"""A gateway's batch-get stream, received straight into the buffers of the caller's sink.

The native client reads a batch get (``POST /v1/{ns}/batch-get``, answered with a stream of
records: s3kv/frames.py) over fastget's connections rather than aiohttp's: each record's header
is read into a few bytes of its own, each block's bytes land in the buffer its reader gives
(``readinto``; client_landing.py), and the chunked framing is taken off on the way
(s3kv.wire.dechunk). aiohttp's parser hands a body over as new ``bytes`` per socket read, and
reading those into the caller's buffer copies them again: two copies of every byte restored,
which this path does not make (the LMCache plugin's batch-get retrieve spent a third of its
CPU in them).

Each block goes to the sink as soon as its record's header is in, before its bytes, so the
reader's buffer is there when they come. The gateway checked every block's CRC-32 before it
sent it; the stream carries none. A reader that falls behind holds the connection: once the
stream is ``AHEAD`` blocks ahead of it, reading pauses until it catches up (what is held in
memory stays within about two blocks).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import quote, urlsplit

from multidict import CIMultiDict

from s3kv.client_io import Sink, error_from_response, together
from s3kv.client_landing import BlockIn, LandedBody, Undelivered
from s3kv.errors import BackendUnavailable, RequestError
from s3kv.frames import RecordCheck, header_doc, header_length
from s3kv.wire.fastget import GetPool, ProtocolError
from s3kv.wire.landing import FramedLanding

#: bytes read at once while a record's header is next: its length prefix and its JSON (a few
#: dozen bytes); the block bytes read with them are copied into the block
HEAD_READ = 256
#: blocks the stream may be ahead of its reader before the connection stops reading
AHEAD = 2
_PREFIX = 4


class _End:
    """The end record: every record came."""


END = _End()
Record = BlockIn | None | _End


class RecordLanding(FramedLanding):
    """A fastget Landing (and Paced sink) over a batch-get response's body: parses its records
    and queues them, in order, for :func:`deliver`; the bytes of each block go to its
    :class:`BlockIn`. A ValueError from any call: the stream is malformed."""

    def __init__(self, keys: Sequence[str]) -> None:
        super().__init__(HEAD_READ)
        self._check = RecordCheck(keys)
        self._head = bytearray()  # the record header's bytes so far
        self._doc_len = -1  # its JSON's length, once its prefix is in
        self._block: BlockIn | None = None  # the block whose bytes come next (``_left`` of them)
        self.ended = False
        self._records: deque[Record] = deque()
        self._wake: asyncio.Future[None] | None = None
        self.error: BaseException | None = None
        self._pause: Callable[[], None] | None = None
        self._resume: Callable[[], None] | None = None
        self._paused = False
        self._begun = 0  # blocks whose record came
        self._read = 0  # blocks their reader is done with

    # ---- the connection's side --------------------------------------------------------------
    def pace(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self._pause, self._resume = pause, resume

    def _in_payload(self) -> bool:
        return self._block is not None

    def _over(self) -> bool:
        return self.ended

    def _payload_space(self) -> memoryview | None:
        assert self._block is not None
        return self._block.space()

    def _payload_landed(self, n: int) -> None:
        assert self._block is not None
        self._block.landed(n)

    def _payload_end(self) -> None:
        self._block = None

    def _payload_take(self, data: memoryview) -> None:
        assert self._block is not None
        self._block.take(data)

    def _framing_from(self, data: memoryview) -> memoryview:  # a record's header
        head = self._head
        want = _PREFIX if self._doc_len < 0 else _PREFIX + self._doc_len
        k = want - len(head)
        head += data[:k]
        if len(head) == _PREFIX and self._doc_len < 0:
            self._doc_len = header_length(head)
        if self._doc_len >= 0 and len(head) == _PREFIX + self._doc_len:
            doc = header_doc(head[_PREFIX:])
            self._head, self._doc_len = bytearray(), -1
            self._arrived(self._check.record(doc))
        return data[k:]

    def _arrived(self, record: tuple[str, int | None] | None) -> None:
        if record is None:
            self.ended = True
            self._queue(END)
            return
        length = record[1]
        if length is None:
            self._queue(None)
            return
        block = BlockIn(length, None)
        if length:
            self._block, self._left = block, length
        self._queue(block)
        self._begun += 1
        if self._begun - self._read > AHEAD and self._pause is not None and not self._paused:
            self._paused = True
            self._pause()

    def _queue(self, record: Record) -> None:
        self._records.append(record)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def finish(self) -> None:
        """The body is over: ValueError if its end record did not come."""
        if not self.ended:
            raise ValueError("the stream ended before its end record")

    def fail(self, error: BaseException) -> None:
        """The stream broke: the blocks not in yet fail, and :meth:`next` raises ``error``."""
        if self.error is None:
            self.error = error
        for record in self._records:
            if isinstance(record, BlockIn):
                record.fail(str(error) or type(error).__name__)
        if self._block is not None:
            self._block.fail(str(error) or type(error).__name__)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # ---- the reader's side ------------------------------------------------------------------
    async def next(self) -> Record:
        while not self._records:
            if self.error is not None:
                raise self.error
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake
        return self._records.popleft()

    def done_with(self) -> None:
        """The reader is done with a block (the next one may come)."""
        self._read += 1
        if self._paused and self._begun - self._read <= AHEAD and self._resume is not None:
            self._paused = False
            self._resume()


async def deliver(landing: RecordLanding, where: Sequence[int], sink: Sink,
                  done: list[bool]) -> None:
    """Give each record to ``sink`` in order (a block as soon as its header is in; the
    record check keeps them within ``where``) and mark the blocks read whole in ``done``."""
    n = 0
    while not isinstance(record := await landing.next(), _End):
        pos = where[n]
        n += 1
        if record is None:
            await sink(pos, None)
            continue
        body = LandedBody(record)
        try:
            await sink(pos, body)
            await body.drain()
        except Undelivered:
            if landing.error is None:
                raise
        else:
            done[pos] = True
            landing.done_with()
            continue
        raise landing.error  # the stream broke: the receive's error, with its cause


class GatewayLost(BackendUnavailable):
    """The gateway's stream could not be read (raised by the receive, never by a sink)."""


async def fetch_stream(pool: GetPool, gateway: str, namespace: str, auth: Mapping[str, str],
                       want: Sequence[str], where: Sequence[int], sink: Sink,
                       done: list[bool]) -> None:
    """Ask ``gateway`` (its base URL) for a batch get of the keys ``want`` and hand the blocks
    of the stream that answers (at the caller's positions ``where``) to ``sink``. Raises
    RequestError (MalformedFrames for a bad stream, or what the gateway's error answer says),
    GatewayLost (the gateway could not be read), or what ``sink`` raised."""
    u = urlsplit(gateway)
    body = json.dumps({"keys": list(want)}).encode()
    target = f"{u.path.rstrip('/')}/v1/{quote(namespace, safe='')}/batch-get"
    headers = {"Host": u.netloc, "Content-Type": "application/json",
               "Content-Length": str(len(body)), **auth}
    endpoint = f"{u.scheme}://{u.netloc}"
    landing = RecordLanding(want)

    async def receive() -> None:
        error: Exception
        try:
            resp = await pool.send("POST", endpoint, target, headers, [body], landing)
            if resp.status < 300:
                landing.finish()
        except ValueError as exc:
            error = RequestError("MalformedFrames", f"bad batch-get stream from {gateway}: "
                                 f"{exc}", 502)
            landing.fail(error)
            raise error from exc
        except (OSError, ProtocolError) as exc:
            error = GatewayLost(f"gateway {gateway} unreachable: {type(exc).__name__}: {exc}")
            landing.fail(error)
            raise error from exc
        except BaseException as exc:
            landing.fail(exc)
            raise
        if resp.status >= 300:
            error = error_from_response(resp.status, resp.error_body, CIMultiDict(resp.headers))
            landing.fail(error)
            raise error

    await together([receive(), deliver(landing, where, sink, done)])
