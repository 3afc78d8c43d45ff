"""The socket side of benchmarks/gateway_inproc.py: requests fed to a connection handler from
memory, answers collected without a kernel in between.

- :class:`Wire`, the only stand-in of that benchmark: an ``asyncio.Transport`` that takes what
  the server writes and parses just enough of it to know when the answer is complete (its head,
  then ``Content-Length`` bytes or a chunked body's last chunk), its status and its size;
- :class:`Side`, one application's connection over a :class:`Wire`;
- :class:`Requests`, complete HTTP/1.1 requests (SigV4-signed, or with the native API's bearer
  token) cut into the pieces one ``recv`` would hand over;
- :func:`calls_of`, the Python function calls a run makes: a count of the interpreter's work
  that does not move with the machine's speed, as CPU time does.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from s3kv.wire.sigv4 import Credentials, Signer

ACCESS, SECRET = "inproc", "inproc-secret-key"
HOST = "127.0.0.1:9470"
_LAST_CHUNK = b"\r\n0\r\n\r\n"  # a chunked body's end: the last data chunk's CRLF, then 0
#: an answer's head is found within its first bytes (an S3 answer's head is well under this)
MAX_HEAD = 16 * 1024


class Wire(asyncio.Transport):
    """What the server writes on one connection, parsed just enough to know when its answer is
    complete and what its status and body size were."""

    def __init__(self) -> None:
        super().__init__()
        self._buf = bytearray()
        self._need = -1  # bytes of a Content-Length answer still to come; -1: no head yet
        self._chunked = False
        self._tail = b""  # a chunked answer's last bytes so far
        self._done: asyncio.Future[tuple[int, int]] | None = None
        self._status = 0
        self._body = 0
        self.flowing = asyncio.Event()  # cleared while the server has paused reading
        self.flowing.set()

    def expect(self) -> asyncio.Future[tuple[int, int]]:
        """The next answer's (status, body bytes on the wire, chunk framing included)."""
        self._buf.clear()
        self._need, self._chunked, self._tail, self._body = -1, False, b"", 0
        self._done = asyncio.get_running_loop().create_future()
        return self._done

    def write(self, data: Any) -> None:
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        if self._need < 0 and not self._chunked:
            # only the head is looked at: a body that comes in the same write (aiohttp joins a
            # small answer's head and its first chunk) is counted, not copied, as a socket's
            # send would not copy it more than once for either side
            before = len(self._buf)
            self._buf += data[:MAX_HEAD]
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) >= MAX_HEAD:
                    raise RuntimeError(f"an answer's head longer than {MAX_HEAD} bytes")
                return
            head = bytes(self._buf[:end]).decode("latin-1").lower().split("\r\n")
            self._buf.clear()
            self._status = int(head[0].split()[1])
            start = end + 4 - before  # where this write's body bytes begin
            self._body = n - start
            if "transfer-encoding: chunked" in head:
                self._chunked = True
                last = bytes(data[max(start, n - len(_LAST_CHUNK)):])
                self._tail = (b"\r\n" + last)[-len(_LAST_CHUNK):]
            else:
                length = next((int(line.split(":", 1)[1]) for line in head[1:]
                               if line.startswith("content-length:")), 0)
                self._need = length - self._body
        elif self._chunked:
            self._body += n
            self._tail = (self._tail + bytes(data[-len(_LAST_CHUNK):]))[-len(_LAST_CHUNK):]
        else:
            self._need -= n
            self._body += n
        complete = self._tail.endswith(_LAST_CHUNK) if self._chunked else self._need <= 0
        if complete and self._done is not None and not self._done.done():
            self._done.set_result((self._status, self._body))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 9470)}.get(
            name, default)

    def pause_reading(self) -> None:
        self.flowing.clear()

    def resume_reading(self) -> None:
        self.flowing.set()

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


@dataclass
class Side:
    name: str
    protocol: Any  # aiohttp's RequestHandler (an asyncio.Protocol)
    wire: Wire = field(default_factory=Wire)

    def __post_init__(self) -> None:
        self.protocol.connection_made(self.wire)

    async def exchange(self, pieces: Sequence[bytes]) -> tuple[int, int]:
        """Hand the pieces over as a socket's reads would come: one per turn of the event loop
        (the handler runs between them, on bytes still in the CPU's cache), none while the
        server has paused reading (its buffer full), until it resumes."""
        done = self.wire.expect()
        for piece in pieces:
            await self.wire.flowing.wait()
            self.protocol.data_received(piece)
            await asyncio.sleep(0)
        return await done


class Requests:
    """Requests as they arrive on a socket, cut into ``recv`` pieces (made untimed)."""

    def __init__(self, recv_size: int) -> None:
        self.recv = recv_size
        self.signer = Signer(Credentials(ACCESS, SECRET, "us-east-1"))

    @staticmethod
    def _head(method: str, path: str, headers: dict[str, str]) -> bytes:
        return (f"{method} {path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()

    def make(self, method: str, path: str, body: bytes = b"") -> list[bytes]:
        """An S3 request, SigV4-signed (UNSIGNED-PAYLOAD), cut into ``recv`` pieces."""
        headers = {"Content-Length": str(len(body))} if method == "PUT" else {}
        raw = self._head(method, path, self.signer.sign(method, HOST, path, "", headers)) + body
        return [raw[i:i + self.recv] for i in range(0, len(raw), self.recv)]

    def native(self, path: str, first: bytes, rest: Sequence[bytes],
               content_type: str) -> list[bytes]:
        """A native API POST with the bearer token s3kv/client.py sends: its head arrives with
        ``first``, then each of ``rest`` as one ``recv`` (shared, not copied, between requests)."""
        length = len(first) + sum(len(p) for p in rest)
        head = self._head("POST", path, {
            "Host": HOST, "Authorization": f"Bearer {ACCESS}:{SECRET}",
            "Content-Type": content_type, "Content-Length": str(length)})
        return [head + first, *rest]


async def checked(side: Side, pieces: Sequence[bytes], what: str, least: int = 0,
                  *, slow_down: bool = False) -> int:
    """Send one request; its status. Raise unless it answered 200/204 with at least ``least``
    body bytes (or 503 SlowDown, when ``slow_down`` allows it)."""
    status, size = await side.exchange(pieces)
    if (status not in (200, 204) or size < least) and not (slow_down and status == 503):
        raise RuntimeError(f"{side.name}: {what} answered {status} with {size} bytes "
                           f"(expected {least} or more) {pieces[0][:60]!r}")
    return status


async def calls_of(run: Callable[[], Awaitable[Any]]) -> int:
    """The Python function calls made on this thread while ``run()`` runs (cProfile's count:
    builtins included, each resumption of a coroutine counted once). The same requests give
    the same count on a fast or a slow day, up to the event loop's own timers."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        await run()
    finally:
        prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]  # function -> (cc, nc, ...)
    return sum(int(entry[1]) for entry in stats.values())
