"""GatewayState's request count: drain() waits for the last request in flight, at most the
grace period."""

from __future__ import annotations

import asyncio
from typing import Any

from s3kv.gateway.state import GatewayState, MemoryBudget


def _state() -> GatewayState:
    none: Any = None
    return GatewayState(store=none, settings=none, metrics=none, verifier=None,
                        budget=MemoryBudget(1))


async def test_drain_waits_for_the_last_request() -> None:
    st = _state()
    assert await st.drain(0.01) == 0  # nothing in flight: at once
    st.enter()
    st.enter()

    async def finish() -> None:
        await asyncio.sleep(0.05)
        st.leave()
        st.enter()  # a request that arrives while draining is waited for too
        st.leave()
        await asyncio.sleep(0.05)
        st.leave()

    task = asyncio.create_task(finish())
    assert await st.drain(5.0) == 0
    await task
    st.enter()
    assert await st.drain(0.05) == 1  # the grace runs out
    st.leave()
    assert await st.drain(0.05) == 0
