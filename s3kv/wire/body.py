"""Request bodies that go out as views of the caller's buffers, in slices.

Python 3.11's asyncio socket transport copies whatever one ``write()`` could not send at once
into a bytearray and trims it from the front after every later send (a memmove of all that
is left, each time). A 64 MiB segment handed to aiohttp whole therefore costs the client
several copies of itself (aiohttp joins it with the headers, the transport buffers the rest,
then trims it send by send). :class:`SlicedBody` writes its buffers in views of at most
``SLICE`` bytes and waits for the socket between them, so nothing is copied but the slice the
kernel did not take yet.

Used by the S3 backend (through botocore, which sees a file-like object: ``read``, ``seek``,
``tell``, ``len``) and by the load generator's own S3 client (which hands it to aiohttp
directly; aiohttp uses any :class:`aiohttp.payload.Payload` as it is).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload

#: what a body is made of (the backends' Buffer)
Buffer = bytes | bytearray | memoryview
#: a body as one buffer, or in the pieces it arrived in (kept, never joined, on the write path)
Pieces = Buffer | Sequence[Buffer]


def pieces_of(data: Pieces) -> Sequence[Buffer]:
    """``data`` as a sequence of buffers (one buffer: a sequence of one)."""
    return (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data


def immutable(piece: Buffer) -> bool:
    """Whether ``piece``'s bytes can never change: ``bytes``, or a read-only view of them
    (those may be kept by reference; anything else must be copied to be kept)."""
    if isinstance(piece, bytes):
        return True
    return isinstance(piece, memoryview) and piece.readonly and isinstance(piece.obj, bytes)


def joined(data: Pieces) -> Buffer:
    """``data`` as one buffer (pieces are joined: a copy; a single one is returned as it is)."""
    parts = pieces_of(data)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def size_of(data: Pieces) -> int:
    # map, not a generator expression: no Python frame resumed per piece (a batch put asks
    # this of every block a few times)
    return sum(map(len, pieces_of(data)))


def views_of(data: Pieces, start: int, end: int) -> list[memoryview]:
    """Bytes [start, end) of ``data`` as views of its pieces (no copy)."""
    out: list[memoryview] = []
    pos = 0
    for piece in pieces_of(data):
        lo, hi = max(start - pos, 0), min(end - pos, len(piece))
        if lo < hi:
            out.append(memoryview(piece)[lo:hi])
        pos += len(piece)
        if pos >= end:
            break
    return out or [memoryview(b"")]


#: bytes per transport write: a few times the loopback socket's send window
SLICE = 1 << 20


def slices(data: Pieces) -> Iterator[memoryview]:
    """``data``'s bytes, in order, as views of at most SLICE bytes (no copy)."""
    for piece in pieces_of(data):
        view = memoryview(piece)
        for start in range(0, len(view), SLICE):
            yield view[start:start + SLICE]


class SlicedBody(Payload):
    """One buffer, or several sent back to back."""

    def __init__(self, data: Buffer | Iterable[Buffer]) -> None:
        if isinstance(data, (bytes, bytearray, memoryview)):
            views = [memoryview(data).cast("B")]
        else:
            views = [memoryview(v).cast("B") for v in data]
        super().__init__(views, content_type="application/octet-stream")
        self._views = views
        self._size = sum(map(len, views))
        self._pos = 0
        self._joined: bytes | None = None

    def __len__(self) -> int:
        return (self._size or 0) - self._pos

    # -- the file-like side botocore looks at (length, the Expect header, stream resets) ------
    def _bytes(self) -> bytes:
        if self._joined is None:
            self._joined = b"".join(self._views)
        return self._joined

    def read(self, size: int = -1) -> bytes:
        data = self._bytes()
        end = len(data) if size < 0 else min(len(data), self._pos + size)
        out = data[self._pos:end]
        self._pos = max(self._pos, end)
        return out

    def seek(self, offset: int, whence: int = 0) -> int:
        total = self._size or 0
        base = {0: 0, 1: self._pos, 2: total}[whence]
        self._pos = max(0, min(total, base + offset))
        return self._pos

    def tell(self) -> int:
        return self._pos

    # -- the aiohttp side ----------------------------------------------------------------------
    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self._bytes().decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: AbstractStreamWriter,
                                content_length: int | None) -> None:
        left = content_length if content_length is not None else -1
        for piece in slices(self._views):
            if left >= 0:
                if left == 0:
                    return
                piece = piece[:left]
                left -= len(piece)
            await writer.write(piece)

    def __repr__(self) -> str:
        return f"<SlicedBody {self._size} bytes>"
