"""One block as the client receives it: its bytes land straight in the buffer its reader gives.

Both of the client's read paths hand blocks to a caller's sink as a :class:`LandedBody` over a
:class:`BlockIn`: direct reads (client_direct.py: a run's ranged GET from the object store)
and a gateway's batch-get stream (client_stream.py). A connection's receive (s3kv.wire.fastget)
asks the block for ``space()``, the rest of the reader's buffer once it called ``readinto``,
and the kernel writes the bytes there: no copy in user space. Bytes that come before the reader
gave a buffer (the header it reads first, or a block it has not reached) are held until it
reads them. A block from the object store carries the CRC-32 the gateway's index holds and is
checked as its bytes land, while they are in cache; one from the gateway's stream was checked
by the gateway before it was sent and carries none.
"""

from __future__ import annotations

import asyncio

from s3kv.client_io import BlockBody
from s3kv.store.layout import checksum_more


class Undelivered(ValueError):
    """The block did not arrive whole and intact (its read failed, or its CRC did not
    match)."""


class BlockIn:
    """One block as its bytes arrive: received straight into the buffer its reader gives
    (``readinto``) once it has given one, held until it reads them before that (the first
    bytes: a header it reads to know the buffer it needs), dropped once it stops reading; its
    CRC-32, if it has one to match (``crc``), updated as the bytes land, in stream order, while
    they are in cache."""

    def __init__(self, length: int, crc: int | None) -> None:
        self.length = length
        self.expected_crc = crc
        self.arrived = 0
        self.crc = 0
        self.held = bytearray()
        self.held_from = 0  # bytes of ``held`` already read
        self.dest: memoryview | None = None  # the part of the reader's buffer still to fill
        self.dropping = False
        # the CRC-32 of b"" is 0: an empty block with another one to match is corrupt
        self.failed = "" if length or not crc else "checksum mismatch"
        self._wake: asyncio.Future[None] | None = None

    @property
    def complete(self) -> bool:
        return self.arrived == self.length or bool(self.failed)

    # ---- the connection's landing feeds it -------------------------------------------------
    def space(self) -> memoryview | None:
        return self.dest if self.dest is not None and len(self.dest) and not self.dropping \
            else None

    def landed(self, n: int) -> None:
        """``n`` bytes were received into the start of ``space()``."""
        assert self.dest is not None
        if self.expected_crc is not None:
            self.crc = checksum_more(self.crc, self.dest[:n])
        self.dest = self.dest[n:]
        self._arrived(n)

    def take(self, data: memoryview) -> None:
        """Bytes received elsewhere: into the reader's buffer, else held (or dropped)."""
        if self.expected_crc is not None:
            self.crc = checksum_more(self.crc, data)
        n = len(data)
        if self.dest is not None and len(self.dest) and not self.dropping:
            k = min(len(self.dest), n)
            self.dest[:k] = data[:k]
            self.dest, data = self.dest[k:], data[k:]
        if len(data) and not self.dropping:
            self.held += data
        self._arrived(n)

    def _arrived(self, n: int) -> None:
        self.arrived += n
        if self.arrived == self.length and self.expected_crc is not None \
                and self.crc != self.expected_crc:
            self.failed = "checksum mismatch"
        self._notify()

    def fail(self, why: str) -> None:
        if not self.complete:
            self.failed = why
            self._notify()

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _wait(self) -> None:
        self._wake = asyncio.get_running_loop().create_future()
        await self._wake

    def _check(self) -> None:
        if self.failed:
            raise Undelivered(self.failed)

    # ---- its reader (a ByteSource for LandedBody) ------------------------------------------
    async def started(self) -> None:
        """Once its first bytes are in (:class:`Undelivered` if it failed first)."""
        while not self.arrived and not self.complete:
            await self._wait()
        if not self.arrived:
            self._check()

    async def read(self, n: int) -> bytes:
        while len(self.held) - self.held_from < min(n, 1) and not self.complete:
            await self._wait()
        self._check()
        piece = bytes(self.held[self.held_from:self.held_from + n])
        self.held_from += len(piece)
        return piece

    async def readexactly(self, n: int) -> bytes:
        while len(self.held) - self.held_from < n and not self.complete:
            await self._wait()
        if len(self.held) - self.held_from < n:
            self._check()
            raise asyncio.IncompleteReadError(b"", n)
        return await self.read(n)

    async def readinto(self, buf: memoryview) -> None:
        held = memoryview(self.held)[self.held_from:]
        k = min(len(held), len(buf))
        buf[:k] = held[:k]
        held.release()
        self.held_from += k
        if self.held_from == len(self.held):
            self.held, self.held_from = bytearray(), 0  # read: let it go
        if k < len(buf):
            self.dest = buf[k:]
            try:
                while self.dest is not None and len(self.dest) and not self.complete:
                    await self._wait()
            finally:  # also when its reader gives up: nothing lands in the buffer after
                self.dest = None
            self._check()

    async def drain(self) -> None:
        self.dropping = True
        self.held = bytearray()
        while not self.complete:
            await self._wait()
        self._check()


class LandedBody(BlockBody):
    """A block's bytes as a connection receives them (a BlockBody: read once, in order);
    ``readinto`` gives the memory the rest of them land in, with no copy.
    :class:`Undelivered` (a ValueError) from any call: the block did not arrive intact."""

    def __init__(self, block: BlockIn) -> None:
        super().__init__(block, block.length)
        self._block = block

    async def readinto(self, buf: memoryview) -> None:
        if len(buf) > self.remaining:
            raise ValueError(f"buffer of {len(buf)} bytes, {self.remaining} left in the block")
        await self._block.readinto(buf)
        self.remaining -= len(buf)

    async def drain(self) -> None:
        await self._block.drain()
        self.remaining = 0
