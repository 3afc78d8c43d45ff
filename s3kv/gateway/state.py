"""What every handler needs, kept in the aiohttp app: the store, settings, auth and budgets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from s3kv.config import Settings
from s3kv.errors import RequestError
from s3kv.gateway.access import Credential
from s3kv.gateway.conditions import KeyLocks
from s3kv.gateway.metrics import GatewayMetrics
from s3kv.store.blocksums import SumWorker
from s3kv.store.store import BlockStore
from s3kv.wire.blocksend import Sender, sender
from s3kv.wire.landrecv import Receiver, receiver
from s3kv.wire.sigv2 import SigV2Verifier
from s3kv.wire.sigv4_verify import SigV4Verifier


class MemoryBudget:
    """Bytes of request bodies and staged parts held at once; over it, 503 SlowDown at once.

    Reservations are taken before a body is read (its declared size, or the largest allowed
    when undeclared) and released when the request ends, so memory stays bounded under any load.
    A reservation that does not fit first asks ``reclaim`` (given the bytes missing) to free
    what may go: multipart uploads left idle (uploads.Uploads.reclaim).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        #: frees idle staged memory, given the bytes a reservation misses (None: nothing to)
        self.reclaim: Callable[[int], object] | None = None

    def reserve(self, n: int) -> int:
        if self.used + n > self.limit and self.reclaim is not None:
            self.reclaim(self.used + n - self.limit)
        if self.used + n > self.limit:
            raise RequestError("SlowDown", "The gateway is holding as many request bodies as "
                               "its memory budget allows; reduce your request rate.", 503,
                               {"Retry-After": "1"})
        self.used += n
        return n

    def release(self, n: int) -> None:
        self.used = max(0, self.used - n)


@dataclass
class GatewayState:
    store: BlockStore
    settings: Settings
    metrics: GatewayMetrics
    verifier: SigV4Verifier | None  # None: no credentials, anonymous on loopback
    budget: MemoryBudget
    #: front credentials by access key (empty: anonymous mode)
    credentials: dict[str, Credential] = field(default_factory=dict)
    #: per-key locks of S3 writes (conditional writes check and write under them)
    key_locks: KeyLocks = field(default_factory=KeyLocks)
    #: SigV2 (older tools, boto3's default presigned URLs), same credentials; None: anonymous
    verifier_v2: SigV2Verifier | None = None
    #: the thread that checksums native batch puts' blocks as they land (closed with the app)
    sums: SumWorker = field(default_factory=SumWorker)
    #: receives landing bodies off the event loop (None: not built; closed with the app)
    receiver: Receiver | None = field(default_factory=receiver)
    #: checks and sends runs of a batch get's blocks in one compiled call (None: not built)
    sender: Sender | None = field(default_factory=sender)
    shutting_down: bool = False
    inflight: int = 0  # requests being handled now (the middleware counts them)
    #: set when the last request in flight leaves; exists only while drain() waits for it
    _idle: asyncio.Event | None = field(default=None, repr=False)

    def summary(self) -> dict[str, float]:
        """The store's counters and gauges (``BlockStore.summary``), with the bytes of request
        bodies and staged parts the front holds now (its memory budget's use)."""
        out = self.store.summary()
        out["request_memory"] = float(self.budget.used)
        return out

    def enter(self) -> None:
        self.inflight += 1

    def leave(self) -> None:
        self.inflight -= 1
        if not self.inflight and self._idle is not None:
            self._idle.set()

    async def drain(self, grace: float) -> int:
        """Wait until no request is in flight, at most ``grace`` seconds; the number left."""
        if self.inflight:
            idle = self._idle = asyncio.Event()
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(grace):
                        await idle.wait()
            finally:
                self._idle = None
        return self.inflight


STATE: web.AppKey[GatewayState] = web.AppKey("s3kv_state", GatewayState)


def state_of(request: web.Request) -> GatewayState:
    return request.app[STATE]
