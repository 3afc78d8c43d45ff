"""Request bodies for the S3 backend that go out in slices.

Python 3.11's asyncio socket transport copies whatever one ``write()`` could not send at once
into a bytearray and trims it from the front after every later send (a memmove of all that
is left, each time). A 64 MiB segment handed to aiohttp whole therefore costs the client
several copies of itself (aiohttp joins it with the headers, the transport buffers the rest,
then trims it send by send). :class:`SlicedBody` writes the bytes in ``SLICE``-sized views
of the caller's buffer and waits for the socket between them, so nothing is copied but the
slice the kernel did not take yet.

botocore sees a file-like object (``read``/``seek``/``tell``/``len``); aiohttp sees a
:class:`aiohttp.payload.Payload` and uses it as it is.
"""

from __future__ import annotations

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload

from s3kv.backends.base import Buffer

#: bytes per transport write: a few times the loopback socket's send window
SLICE = 1 << 20


class SlicedBody(Payload):
    def __init__(self, data: Buffer) -> None:
        view = memoryview(data).cast("B")
        super().__init__(view, content_type="binary/octet-stream")
        self._view = view
        self._size = len(view)
        self._pos = 0

    def __len__(self) -> int:
        return len(self._view) - self._pos

    # -- the file-like side botocore looks at (length, the Expect header, stream resets) ------
    def read(self, size: int = -1) -> bytes:
        end = len(self._view) if size < 0 else min(len(self._view), self._pos + size)
        out = bytes(self._view[self._pos:end])
        self._pos = end
        return out

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._view)}[whence]
        self._pos = max(0, min(len(self._view), base + offset))
        return self._pos

    def tell(self) -> int:
        return self._pos

    # -- the aiohttp side ----------------------------------------------------------------------
    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return bytes(self._view).decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: AbstractStreamWriter,
                                content_length: int | None) -> None:
        end = len(self._view)
        if content_length is not None:
            end = min(end, content_length)
        for start in range(0, end, SLICE):
            await writer.write(self._view[start:min(end, start + SLICE)])

    def __repr__(self) -> str:
        return f"<SlicedBody {len(self._view)} bytes>"
