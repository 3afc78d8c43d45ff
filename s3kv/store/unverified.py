"""A stored block handed out before its checksum was checked, for a reader that checks it in
the same pass as it sends it (the native batch get: s3kv/wire/blocksend.py).

The store checks every block it reads: a block that fails is a miss, counted, logged and
forgotten, never data. Checked on the event loop just before its send, a block lent as a view
of a mapped segment costs a read of its bytes from memory no cache holds, and the send then
reads them again. A reader that asks for unverified blocks (``BlockStore.iter_unverified``)
gets such blocks as :class:`Unverified`: it must compare the block's CRC-32
with ``crc`` before a byte of it leaves, and on a mismatch call :meth:`Unverified.reject`,
which does what the store does with a corrupt block, and send a miss instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from s3kv.wire.body import Pieces


@dataclass(frozen=True, slots=True)
class Unverified:
    """A block's bytes (a view the backend lends), the CRC-32 it was stored with, and what the
    store does if they do not match (``reject``: count, log, forget the block)."""

    view: memoryview
    crc: int
    reject: Callable[[], None]


#: what ``iter_unverified`` hands out per key: checked bytes, a block to check, or a miss
Sendable = Pieces | Unverified | None
