"""The one retry policy: exponential backoff with full jitter, for transient backend errors only."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from s3kv.errors import BackendError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Retry ``BackendError(transient=True)`` up to ``attempts`` times within ``deadline`` seconds.

    Backoff before attempt n (n >= 1) is uniform in [0, min(cap, base * 2**n)] ("full jitter").
    Non-transient errors (4xx, missing objects, integrity) are never retried.
    """

    attempts: int = 4
    base: float = 0.05
    cap: float = 1.0
    deadline: float = 10.0

    async def run(self, op: Callable[[], Awaitable[T]]) -> T:
        start = time.monotonic()
        attempt = 0
        while True:
            try:
                return await op()
            except BackendError as exc:
                attempt += 1
                if not exc.transient or attempt >= self.attempts:
                    raise
                delay = random.uniform(0, min(self.cap, self.base * (2**attempt)))
                if time.monotonic() - start + delay > self.deadline:
                    raise
                await asyncio.sleep(delay)


NO_RETRY = RetryPolicy(attempts=1)
#: seconds a segment's uploads keep retrying while the backend fails: a restart of radosgw down
#: for 3 s lost every block of the segments uploading then when four quick attempts (~0.7 s)
#: were all they had (tests/store/test_rgw_restart.py)
OUTAGE_GRACE = 10.0


def riding_out(limit: float) -> RetryPolicy:
    """The segment writer's policy: retry for ``OUTAGE_GRACE`` seconds (or ``limit``, if
    shorter), the deadline the bound rather than a count of attempts (the backoff reaches
    ``cap``, 1 s, after five)."""
    return RetryPolicy(attempts=64, deadline=min(OUTAGE_GRACE, limit))
