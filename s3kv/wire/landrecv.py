"""A landing body received off the event loop, its blocks checksummed while in cache.

A native batch put's blocks and a large PutObject's body land straight in their segment
(store/landing.py, gateway/takeover.py). Received by the event loop, each socket read was a
turn of the interpreter, and the CRCs were worked out after the bytes had left the CPU's cache
(a batch's on a worker thread, a PUT's on the loop): together ~40 % of the gateway's CPU per
block (docs/performance-log.md, issue 17, session 39). :class:`Receiver` hands the rest of such a
body (``LEAST`` bytes or more of it still to come) to the compiled loop of
``_landrecv.c`` on a thread of its own: it reads the socket into the windows in reads of
``MAX_READ`` and sums each read's bytes into its block's CRC right after, with the GIL
released. What it cannot finish (a slow client past ``BUDGET``, a caller that gave up) is left
to the event loop's receive, as before; where the extension did not build, :func:`receiver`
is None and everything goes as before.

The loop reads a duplicate of the connection's descriptor, so the socket stays open under it
whatever the event loop does meanwhile; the connection pauses its transport's reading for the
time (nothing else reads the socket) and sets :attr:`Receiving.stop` if it gives up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import ModuleType

from s3kv.log import get_logger
from s3kv.wire.zngcrc import crc_address

log = get_logger(__name__)

_landrecv: ModuleType | None
try:
    from s3kv.wire import _landrecv
except ImportError:  # built without a C compiler: the event loop receives every body
    _landrecv = None

#: bytes per read: a read and its CRC right after it stay within this VM's 2 MiB L2
MAX_READ = 256 * 1024
#: a receive still going after this long is handed back to the event loop (a slow client
#: holds no thread of the pool for longer)
BUDGET = 2.0
#: bodies received at once off the loop; more wait for nobody: the event loop receives them
WORKERS = 4
#: a body with fewer bytes still to come is received by the event loop: the hop to a thread
#: and back costs about what it saves at 4 MiB (one gateway, PUTs of one size, 4 connections:
#: 2 MiB -5 to -8 % PUT/s, 4 MiB even, 8 MiB +6 %, 32 MiB +13 to +15 %)
LEAST = 4 * 1024 * 1024


@dataclass(frozen=True)
class Received:
    """What the compiled loop did: ``n`` bytes received after the ones already in; ``whole``:
    the windows are full, ``crcs`` each block's CRC-32 (empty unless whole); ``ended``: the
    peer closed its side first; ``error``: the errno of a failed read (0: none)."""

    n: int
    whole: bool
    ended: bool
    error: int
    crcs: list[int]


@dataclass
class Receiving:
    """One receive under way: ``stop`` set to 1 makes it return at its next read or wait."""

    stop: bytearray = field(default_factory=lambda: bytearray(1))

    def cancel(self) -> None:
        self.stop[0] = 1


class Receiver:
    """Up to ``workers`` landing bodies received off the event loop at once."""

    def __init__(self, workers: int = WORKERS, *, max_read: int = MAX_READ,
                 budget: float = BUDGET) -> None:
        assert _landrecv is not None
        self._crc = crc_address()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="s3kv-landrecv")
        self._free = workers
        self._closed = False
        self._max_read = max_read
        self._budget_ms = max(0, int(budget * 1000))

    def can_start(self) -> bool:
        """Whether a worker is free (else the event loop receives the body)."""
        return self._free > 0 and not self._closed

    def start(self, fd: int, spans: Sequence[memoryview], filled: int,
              lengths: Sequence[int]) -> tuple[Receiving, asyncio.Future[Received]]:
        """Receive into ``spans`` from byte ``filled`` on (those before are in) from the socket
        ``fd``; the future's result says how far it got. Call only when :meth:`can_start`.
        Raises ValueError if ``lengths`` do not add up to the spans' bytes, OSError if no
        descriptor is to spare or the receiver is closed."""
        if sum(lengths) != sum(map(len, spans)) or not 0 <= filled <= sum(lengths):
            raise ValueError("the blocks' lengths must add up to the spans' bytes")
        receiving = Receiving()
        dup = os.dup(fd)
        try:
            future = asyncio.get_running_loop().run_in_executor(
                self._pool, self._run, dup, list(spans), filled, list(lengths), receiving.stop)
        except RuntimeError as exc:  # the pool is shut down
            os.close(dup)
            raise OSError("the receiver is closed") from exc
        self._free -= 1
        future.add_done_callback(self._done)
        return receiving, future

    def _done(self, _: asyncio.Future[Received]) -> None:
        self._free += 1

    def _run(self, fd: int, spans: list[memoryview], filled: int, lengths: list[int],
             stop: bytearray) -> Received:  # on a pool thread
        assert _landrecv is not None
        try:
            n, status, error, crcs = _landrecv.receive(fd, spans, filled, lengths, self._crc,
                                                       self._max_read, stop, self._budget_ms)
        finally:
            os.close(fd)
        if status == _landrecv.FAILED:
            log.info("landrecv.read_failed", error=os.strerror(error), received=n)
        return Received(n, status == _landrecv.DONE, status == _landrecv.ENDED, error, crcs)

    def close(self) -> None:
        """No new receives; those under way end within ``budget``."""
        self._closed = True
        self._pool.shutdown(wait=False)


def receiver(workers: int = WORKERS) -> Receiver | None:
    """A :class:`Receiver`, or None where the compiled loop is not built (or zlib-ng's CRC is
    not found)."""
    if _landrecv is None or workers <= 0:
        return None
    with contextlib.suppress(OSError, AttributeError):
        return Receiver(workers)
    log.warning("landrecv.unavailable", reason="zlib_ng's zng_crc32 not found")
    return None
