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
