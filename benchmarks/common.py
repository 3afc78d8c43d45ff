"""What every benchmark here runs its operations with."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def run_concurrently(n: int, concurrency: int,
                           op: Callable[[int], Awaitable[None]]) -> None:
    """op(0..n-1), ``concurrency`` at a time, each worker taking the next index."""
    it = iter(range(n))

    async def worker() -> None:
        for i in it:
            await op(i)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
