"""Whether the backend takes writes: marked down by a failed upload, probed until it answers.

While it is down, writes are refused at once (Backpressure: retry later) instead of filling
memory with segments that cannot go anywhere; a probe (the backend's ``check``) runs with
growing pauses and marks it up again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from s3kv.backends.base import Backend
from s3kv.errors import BackendError, Backpressure
from s3kv.log import get_logger
from s3kv.store.stats import StoreStats

log = get_logger(__name__)


class BackendHealth:
    def __init__(self, backend: Backend, stats: StoreStats) -> None:
        self.backend = backend
        self.stats = stats
        self.healthy = True
        self.last_error = ""
        self._probe: asyncio.Task[None] | None = None

    def check(self) -> None:
        """Raise Backpressure (counted) if the backend is down."""
        if not self.healthy:
            self.stats.backpressure_rejections += 1
            raise Backpressure(f"backend unavailable ({self.last_error}); retry later", 1.0)

    def mark_down(self, reason: str) -> None:
        self.last_error = reason
        if self.healthy:
            log.warning("backend.unhealthy", reason=reason)
        self.healthy = False
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._until(self._answers, "probe", 0.25))

    def mark_full(self, reason: str, make_room: Callable[[], Awaitable[bool]]) -> None:
        """The backend refused a write for lack of room: writes are refused until
        ``make_room`` (an eviction round: fullness.py) says a segment fits again, not until a
        probe answers (a full bucket answers HEAD as ever, and writes let in then failed)."""
        self.mark_down(reason)
        if self._probe is not None:
            self._probe.cancel()
        self._probe = asyncio.create_task(self._until(make_room, "eviction", 0.0))

    def mark_up(self) -> None:
        """A write reached the backend (a segment sealed): it is up, whatever failed before.
        Segments opened during an outage can fail after it ends (their bucket gone, a stale
        connection); one sealed since then proves the backend takes writes again."""
        if not self.healthy:
            self.healthy = True
            log.info("backend.recovered", by="upload")
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None

    async def _answers(self) -> bool:
        await self.backend.check()  # BackendError while it does not
        return True

    async def _until(self, ready: Callable[[], Awaitable[bool]], by: str, delay: float) -> None:
        """Mark the backend up once ``ready()`` says so (False, BackendError or Backpressure:
        not yet), asked after ``delay`` seconds, then after pauses growing to 2 s."""
        while not self.healthy:
            await asyncio.sleep(delay)
            with contextlib.suppress(BackendError, Backpressure):
                if await ready():
                    self.healthy = True
                    log.info("backend.recovered", by=by)
                    return
            delay = min(2.0, max(delay, 0.125) * 2)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
