"""A large request body taken from the socket reads as they arrive, past aiohttp's parser.

aiohttp's HTTP parser hands each socket read's body bytes to the request's stream as a new
bytes object, a copy of the read (``at[:length]`` in its C parser). For a 32 MiB PUT that copy
was ~16 % of the gateway's CPU (a ``memmove`` per byte received, on top of the kernel's own
copy). An admitted body of a declared length does not need the parser: the connection
(:class:`~s3kv.gateway.protocol.S3RequestHandler`) gives each socket read to a
:class:`BodyTake` as it is, as one piece of the body, until the body's last byte; then the
connection gets a new parser for whatever follows (a keep-alive connection's next request).

The bytes the parser had already passed on before the take are the body's first pieces, so
nothing is read twice or skipped. A take that its reader gives up on (a refused or timed-out
body) keeps counting the body's bytes and drops them, so the connection stays in step with the
client for its next request, as aiohttp's own lingering read would.

A body can also land (:class:`BodyLanding`): received straight into writable windows, its
blocks' places in their segment (store/landing.py). The connection's transport then reads into
the windows itself (:class:`LandingReads`, an ``asyncio.BufferedProtocol`` put in place of the
connection's protocol until the body's last byte), so the kernel's copy out of the socket is
the only one; the reader's pieces are views of the windows as they fill. A landing given up
reads the rest of the body into a scratch buffer: its windows are never written after that.
A landing whose blocks are checksummed (:class:`Sums`: a batch put's blocks, a PutObject's
store CRC) can instead be received off the event loop by the compiled loop of wire/landrecv.py
(:meth:`BodyLanding.received_off_loop`), which works the CRCs out as the bytes come; what it
does not finish the transport reads as above.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from aiohttp.streams import StreamReader

from s3kv.wire.landrecv import Received, Receiving

#: a body is taken only if at least this many of its bytes are still to come from the socket
#: (below it, the parser's copy costs less than the take)
TAKE_MIN = 256 * 1024
#: the most a landing given up reads at a time (into a scratch buffer, then dropped)
_SCRATCH = 256 * 1024


class Sums(Protocol):
    """The blocks' checksums of a landing (store/blocksums.py's ``RunningSums``): fed the
    spans' bytes in order, or told the values outright."""

    @property
    def lengths(self) -> Sequence[int]:
        """The blocks' lengths, in order: they add up to the spans' bytes."""

    def feed(self, piece: memoryview) -> None: ...

    def settle(self, crcs: list[int]) -> None: ...


class BodyTake:
    """The rest of one request body: fed by the connection, read as pieces by the body
    reader (``readchunk`` / ``at_eof``, as an aiohttp stream). ``content``: the request's
    own stream, marked read to the end when the take is complete."""

    def __init__(self, content: StreamReader, first: list[bytes], remaining: int) -> None:
        self.content = content
        #: bytes of the body still to come from the socket
        self.remaining = remaining
        self._pieces: deque[bytes | memoryview] = deque(p for p in first if p)
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._dropping = False

    # -- the connection's side ----------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        """Take what of ``data`` belongs to the body; return the rest (what follows the body
        on the connection: copied, as it is at most one read's tail)."""
        if len(data) <= self.remaining:
            piece, rest = data, b""
        else:
            piece, rest = data[:self.remaining], data[self.remaining:]
        self.remaining -= len(piece)
        if piece and not self._dropping:
            self._pieces.append(piece)
            self._wake()
        return rest

    def fail(self, exc: BaseException) -> None:
        """The connection is gone: the reader gets ``exc``."""
        self._error = exc
        self._wake()

    def drop(self) -> None:
        """The reader gave up: the body's remaining bytes are counted and dropped."""
        self._dropping = True
        self._pieces.clear()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the reader's side --------------------------------------------------------------------

    async def readchunk(self) -> tuple[bytes | memoryview, bool]:
        """The next piece of the body as received, as aiohttp's ``StreamReader.readchunk``:
        ``(b"", False)`` never; ``(b"", True)`` once every byte was read."""
        while not self._pieces:
            if self._error is not None:
                # a new error, caused by the one kept: raised itself, the kept one would hold
                # this frame, and through it this take (and a landing's windows onto its
                # segment's file), in its traceback: a cycle only the collector breaks
                raise ConnectionResetError(f"the body was cut short: {self._error}") \
                    from self._error
            if self.remaining == 0 or self._dropping:
                return b"", True
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._pieces.popleft(), False

    def at_eof(self) -> bool:
        return not self._pieces and (self.remaining == 0 or self._error is not None
                                     or self._dropping)


class BodyLanding(BodyTake):
    """The rest of one request body, received into ``spans`` (writable windows, in order,
    whose lengths add up to what is left of the body) through :class:`LandingReads`.
    ``head``: the body's bytes its caller read already, its first pieces as they are;
    ``first``: the bytes received since (copied in); ``sums``: fed each piece of the spans as
    it is filled, in order (a native batch put's blocks are checksummed as they arrive);
    ``deferred``: not yet (a receive off the loop may settle them, :meth:`received_off_loop`)."""

    def __init__(self, content: StreamReader, head: list[bytes], first: list[bytes],
                 spans: list[memoryview], sums: Sums | None = None, *,
                 deferred: bool = False) -> None:
        super().__init__(content, head, sum(map(len, spans)))
        self.spans = spans
        self.sums = sums
        #: the receive off the event loop under way, if any (cancelled if the body is given up)
        self.receiving: Receiving | None = None
        #: bytes received off the event loop
        self.off_loop = 0
        self._deferred = deferred
        self._span = 0  # the span being filled
        self._filled = 0  # bytes of it filled
        self._scratch: memoryview | None = None
        for piece in first:
            view = memoryview(piece)
            while view:
                buf = self.buffer()
                n = min(len(buf), len(view))
                buf[:n] = view[:n]
                self.received(n)
                view = view[n:]

    @property
    def filled(self) -> int:
        """Bytes of the spans received."""
        return sum(map(len, self.spans)) - self.remaining

    def buffer(self) -> memoryview:
        """Where the next socket read goes: the rest of the span being filled; once given up,
        a scratch buffer (the spans are blocks' places in a segment: nothing writes them after
        that)."""
        if not self._dropping:
            return self.spans[self._span][self._filled:]
        if self._scratch is None:
            self._scratch = memoryview(bytearray(_SCRATCH))
        return self._scratch[:self.remaining]

    def received(self, n: int) -> None:
        """``n`` bytes were read into :meth:`buffer`."""
        self.remaining -= n
        if self._dropping:
            return
        span = self.spans[self._span]
        piece = span[self._filled:self._filled + n]
        self._pieces.append(piece)
        if self.sums is not None and not self._deferred:
            self.sums.feed(piece)
        self._filled += n
        if self._filled == len(span) and self._span + 1 < len(self.spans):
            self._span, self._filled = self._span + 1, 0
        self._wake()

    def received_off_loop(self, got: Received | None) -> None:
        """The compiled loop received ``got.n`` more bytes into the spans (None: it failed to
        run): they become pieces; the blocks' sums are settled if it received them all, else
        fed every byte in so far, and the rest is fed as it comes."""
        self.receiving = None
        left = got.n if got is not None else 0
        self.off_loop += left
        if self._dropping:  # given up meanwhile: counted, and dropped
            self.received(left)
            left = 0
        while left:  # one piece per span (each non-empty, as :meth:`buffer` needs too)
            n = min(left, len(self.spans[self._span]) - self._filled)
            if n <= 0:
                raise RuntimeError("more bytes received than the spans hold")
            self.received(n)
            left -= n
        if self._deferred and self.sums is not None and not self._dropping:
            if got is not None and got.whole:
                self.sums.settle(got.crcs)
            else:
                filled = self.filled
                for span in self.spans:
                    if filled <= 0:
                        break
                    self.sums.feed(span[:filled])
                    filled -= len(span)
        self._deferred = False

    def drop(self) -> None:
        super().drop()
        if self.receiving is not None:
            self.receiving.cancel()

    def fail(self, exc: BaseException) -> None:
        if self.receiving is not None:
            self.receiving.cancel()
        super().fail(exc)


class LandingReads(asyncio.BufferedProtocol):
    """The connection's protocol while a body lands: the transport reads into the landing's
    buffer, and ``done()`` is called after the body's last byte (it puts ``connection`` back);
    everything else is the connection's."""

    def __init__(self, connection: asyncio.Protocol, landing: BodyLanding,
                 done: Callable[[], None]) -> None:
        self.connection = connection
        self.landing = landing
        self.done = done

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.landing.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.landing.received(nbytes)
        if self.landing.remaining == 0:
            self.done()

    def eof_received(self) -> bool | None:
        return self.connection.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection.connection_lost(exc)

    def pause_writing(self) -> None:
        self.connection.pause_writing()

    def resume_writing(self) -> None:
        self.connection.resume_writing()


def drain(content: StreamReader) -> list[bytes]:
    """What ``content`` holds now and what its parser still keeps back, without waiting: the
    bytes aiohttp has received of the body so far, as they were received.

    A parser paused on a full stream keeps the rest of its last read; reading the stream below
    its low-water mark makes aiohttp parse that rest into the stream, so this reads until the
    stream's count of bytes fed stops growing."""
    pieces: list[bytes] = []
    taken = 0
    while content.total_bytes > taken:
        if content.exception() is not None:
            break
        piece = content.read_nowait(-1)
        if not piece:
            break
        pieces.append(piece)
        taken += len(piece)
    return pieces
