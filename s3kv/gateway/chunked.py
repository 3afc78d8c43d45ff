"""A response's body written as vectors: each chunk (its framing, a record and the block's
views, for a chunked body; up to SLICE bytes of the body's own buffers, for a body of a known
length) goes to the socket in one ``writev``, with no copy in user space.

On Python 3.11 aiohttp joins what it writes (``b"".join``: a copy of the whole block) before
the transport sends it: every chunk with its framing, and a response's head with its body (a
GET of a 256 KiB object copied it once on the event loop before the kernel's own copy).
:class:`ChunkSender` and :class:`BodySender` write straight to the socket (``os.writev``,
which releases the GIL) while the transport has nothing queued, and hand only what the
socket did not take to the transport, which queues it (a copy of that rest only) and sends it
before anything written later, so the order holds. The next chunk goes straight out again
once the transport's queue is empty; until then it is queued too. Measured in a batch get of
random 256 KiB blocks: 96 % of the chunks went out whole in their ``writev``, 3 % in part,
0.5 % were queued; a 256 KiB GET: ~7 % less of the gateway's CPU (docs/performance-log.md).

The response's head goes out through aiohttp first (:meth:`BodySender.start`), its end
through ``write_eof``. A transport that is not a plain socket (TLS) gets every chunk through
the transport.

A client that takes none of its response (uptake.py: what its TCP acknowledges) for
``SEND_IDLE_TIMEOUT`` seconds while the body waits on it is cut (:func:`drained`), as a request
body that stops arriving is: its blocks, and their room in the store's read budget
(store/readbudget.py), are let go of.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence

from aiohttp import web

from s3kv.gateway.uptake import Uptake
from s3kv.store import layout
from s3kv.wire.blocksend import Sender
from s3kv.wire.body import SLICE, Buffer, slices

CRLF = b"\r\n"
#: seconds a response may wait for its client to take any of it (as a request body may wait
#: for its next bytes, bodies.BODY_IDLE_TIMEOUT) before the connection is cut
SEND_IDLE_TIMEOUT = 20.0


class BodySender:
    """Writes a prepared response's body of a known length (its Content-Length): its bytes as
    they are (see the module's docstring)."""

    def __init__(self, request: web.Request, resp: web.StreamResponse) -> None:
        self._resp = resp
        self._writer = request.writer
        self._transport = request.transport
        self._fd = -1
        self._uptake: Uptake | None = None

    async def start(self) -> None:
        """Send the response's head (aiohttp holds it until the body's first write)."""
        await self._resp.write(b"")
        transport = self._transport
        if transport is not None and transport.get_extra_info("ssl_object") is None:
            sock = transport.get_extra_info("socket")
            self._fd = -1 if sock is None else sock.fileno()

    async def write(self, head: bytes, pieces: Sequence[Buffer] = ()) -> None:
        """``head`` then ``pieces``, in chunks of at most SLICE bytes (one for a head and its
        block up to that size): a block larger than what the socket takes at once is not
        queued whole (the transport would copy all it did not send)."""
        for group, size in vector_groups([head, *pieces]):
            await self._send(self._frame(group, size))

    def _frame(self, group: list[Buffer], size: int) -> list[Buffer]:
        return group

    async def _send(self, bufs: list[Buffer]) -> None:
        transport = self._transport
        if transport is None:
            raise ConnectionResetError("the client closed the connection")
        if send_vectors(transport, self._fd, bufs):
            if self._uptake is None:  # at its first wait: an answer that never waits asks none
                self._uptake = Uptake(transport)
            await drained(self._writer.drain(), transport, self._uptake)


class ChunkSender(BodySender):
    """A chunked body: each chunk framed with its size."""

    #: bytes of blocks :meth:`write_checked` had the compiled loop send
    compiled_bytes = 0

    def _frame(self, group: list[Buffer], size: int) -> list[Buffer]:
        return [b"%x\r\n" % size, *group, CRLF]

    async def write_checked(self, records: Sequence[bytes], views: Sequence[memoryview],
                            crcs: Sequence[int], bad: Callable[[int], bytes],
                            compiled: Sender | None) -> int:
        """Block ``i`` as one chunk, ``records[i]`` then ``views[i]``, if its CRC-32 is
        ``crcs[i]``; else the chunk ``bad(i)`` (its miss record) instead. Checked and sent by
        ``compiled`` (wire/blocksend.py: no interpreter work per block) while the socket is
        plain and the transport has nothing queued, else one by one here. Returns the bytes of
        the blocks sent; :attr:`compiled_bytes` counts those the compiled loop sent."""
        sent, i, n = 0, 0, len(views)
        heads: list[bytes] = []  # each block's chunk size line and record, made once
        while i < n:
            transport = self._transport
            if transport is None or transport.is_closing():
                raise ConnectionResetError("the client closed the connection")
            if compiled is not None and self._fd >= 0 and not transport.get_write_buffer_size():
                heads = heads or [b"%x\r\n" % (len(r) + len(v)) + r
                                  for r, v in zip(records, views, strict=True)]
                done = compiled.send(self._fd, heads[i:], views[i:], crcs[i:], CRLF)
                if done.error:  # reset, broken pipe: the connection is gone, as the
                    transport.abort()  # middleware then sees (a client gone, not a fault)
                    raise ConnectionResetError(os.strerror(done.error))
                whole = sum(map(len, views[i:i + done.blocks]))
                sent += whole
                self.compiled_bytes += whole
                i += done.blocks
                if i == n:
                    break
                if done.bad:
                    await self.write(bad(i))
                    i += 1
                    continue
                if done.partial:  # checked, in part sent: the transport queues the rest
                    await self._send(_after([heads[i], views[i], CRLF], done.partial))
                    sent += len(views[i])
                    i += 1
                    continue
            if layout.checksum(views[i]) == crcs[i]:
                await self.write(records[i], (views[i],))
                sent += len(views[i])
            else:
                await self.write(bad(i))
            i += 1
        return sent


def vector_groups(pieces: Sequence[Buffer]) -> Iterator[tuple[list[Buffer], int]]:
    """``pieces``' bytes, in order, as groups of views of at most SLICE bytes together (a view
    as large, alone) and each group's size: what one ``writev`` is given at a time."""
    group: list[Buffer] = []
    size = 0
    for view in slices(pieces):
        if group and size + len(view) > SLICE:
            yield group, size
            group, size = [], 0
        group.append(view)
        size += len(view)
    if size:
        yield group, size


def send_vectors(transport: asyncio.Transport, fd: int, bufs: list[Buffer]) -> bool:
    """``bufs`` straight to the socket ``fd`` (-1: none, as under TLS) while ``transport``
    holds nothing, what it did not take through the transport, which queues it (a copy of that
    rest only) and sends it before anything written later; whether anything was queued (the
    caller lets the transport drain then)."""
    if transport.is_closing():
        raise ConnectionResetError("the client closed the connection")
    if fd >= 0 and not transport.get_write_buffer_size():
        try:
            sent = os.writev(fd, bufs)
        except OSError:  # would block, or a failure the transport's write reports
            sent = 0
        bufs = _after(bufs, sent)
        if not bufs:
            return False
    transport.writelines(bufs)
    return True


async def drained(drain: Awaitable[None], transport: asyncio.Transport,
                  uptake: Uptake) -> None:
    """Wait for ``drain`` (the transport's queue falling below its limit) while the client
    takes some of the answer (``uptake``, kept across the answer's waits) every
    ``SEND_IDLE_TIMEOUT`` seconds; if it takes none for that long, abort the connection and
    raise ConnectionResetError."""
    task = asyncio.ensure_future(drain)
    uptake.back()
    try:
        while not task.done():
            idle = uptake.idle(look=False)  # a look (two system calls) only once it is due
            if idle >= SEND_IDLE_TIMEOUT and (idle := uptake.idle()) >= SEND_IDLE_TIMEOUT:
                transport.abort()
                raise ConnectionResetError(f"the client took none of the response for "
                                           f"{SEND_IDLE_TIMEOUT:g} s")
            await asyncio.wait((task,), timeout=SEND_IDLE_TIMEOUT - idle)
        task.result()
    finally:
        uptake.away()
        if task is not drain:  # made here (a coroutine): the caller's own future is left be
            task.cancel()


def _after(bufs: list[Buffer], n: int) -> list[Buffer]:
    """What is left of ``bufs`` once their first ``n`` bytes are sent (views, no copy)."""
    for i, buf in enumerate(bufs):
        if n < len(buf):
            return [memoryview(buf)[n:] if n else buf, *bufs[i + 1:]]
        n -= len(buf)
    return []
