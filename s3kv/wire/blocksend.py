"""A run of stored blocks checked and sent by one compiled call, each CRC-32 worked out right
before the block's send.

A native batch get sends blocks the file backend lends as views of the segment files it maps.
Sent one by one from Python, each block cost its CRC (read from memory no cache holds, ~38 us
per 256 KiB here), the ``writev`` of its chunk, and ~30 us of the interpreter's work around
them: the store's generator, the record, the sender (docs/performance-log.md, issue 17).
:func:`Sender.send` hands a run of such blocks to ``_blocksend.c``, which for each block works
out the CRC and, only if it is the one the block was stored with, sends the block's head, bytes
and tail in one ``sendmsg`` while they are in cache. It never waits (a call is as long as the
socket takes bytes at once: the event loop's usual non-blocking send, with the GIL released):
it stops before a block that fails its check (nothing of it is sent, the caller sends a miss),
and when the socket takes no more, saying how much of the block under way went out. Where the
extension did not build, :func:`sender` is None and every block is checked and sent in Python.

The caller sends only while the transport has nothing queued and writes nothing else meanwhile,
so the bytes go out in order.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from s3kv.log import get_logger
from s3kv.wire.zngcrc import crc_address

log = get_logger(__name__)

_blocksend: ModuleType | None
try:
    from s3kv.wire import _blocksend
except ImportError:  # built without a C compiler: every block is checked and sent in Python
    _blocksend = None


@dataclass(frozen=True)
class Sent:
    """What the compiled loop did: ``blocks`` sent whole; then, unless every block went,
    ``bad``: the next block failed its check (nothing of it sent), else ``partial`` bytes of
    the next block's head, bytes and tail went out before the socket took no more (if any did,
    the block passed its check); ``error``: the errno of a failed send (0: none)."""

    blocks: int
    partial: int
    bad: bool
    error: int


class Sender:
    """Checks and sends runs of blocks through a socket, each block only if it is intact."""

    def __init__(self) -> None:
        assert _blocksend is not None
        self._crc = crc_address()

    def send(self, fd: int, heads: Sequence[bytes], views: Sequence[memoryview],
             crcs: Sequence[int], tail: bytes) -> Sent:
        """Check and send ``views`` to the non-blocking socket ``fd``, each after its head and
        before ``tail``, as far as the socket takes them now. Raises ValueError if the
        sequences differ in length or a CRC is not a CRC-32."""
        assert _blocksend is not None
        blocks, partial, status, error = _blocksend.send(fd, heads, views, crcs, tail,
                                                         self._crc)
        if status == _blocksend.FAILED:
            log.info("blocksend.send_failed", error=os.strerror(error), blocks=blocks)
        return Sent(blocks, partial, status == _blocksend.BAD, error)


def sender() -> Sender | None:
    """A :class:`Sender`, or None where the compiled loop is not built (or zlib-ng's CRC is
    not found)."""
    if _blocksend is None:
        return None
    with contextlib.suppress(OSError, AttributeError):
        return Sender()
    log.warning("blocksend.unavailable", reason="zlib_ng's zng_crc32 not found")
    return None
