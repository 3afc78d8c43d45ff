"""The body's idle watchdog: a stalled body is a 400 RequestTimeout, a slow but moving one is
not, and a cancellation from elsewhere stays a cancellation."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from aiohttp import StreamReader
from multidict import CIMultiDict

from s3kv.errors import RequestError
from s3kv.gateway.bodies import read_body
from s3kv.gateway.state import MemoryBudget
from s3kv.gateway.watchdog import IdleWatchdog

IDLE = 0.2


def _stream() -> StreamReader:
    return StreamReader(mock.Mock(_reading_paused=False), 2**16,
                        loop=asyncio.get_running_loop())


def _request(stream: StreamReader, length: int) -> Any:
    return SimpleNamespace(content=stream, transport=None, protocol=None, content_length=length,
                           headers=CIMultiDict({"Content-Length": str(length)}),
                           get=lambda name, default=None: default)


def _state() -> Any:
    return SimpleNamespace(budget=MemoryBudget(1 << 20),
                           metrics=SimpleNamespace(bytes_in=mock.Mock()))


async def test_stalled_body_is_request_timeout_and_frees_its_reservation() -> None:
    stream = _stream()
    stream.feed_data(b"x" * 100)  # then nothing more of the 1000 bytes announced
    st = _state()
    with pytest.raises(RequestError) as info:
        await read_body(_request(stream, 1000), st, 1 << 20, idle=IDLE)
    assert (info.value.code, info.value.status) == ("RequestTimeout", 400)
    assert st.budget.used == 0


async def test_slow_body_that_keeps_moving_is_read() -> None:
    stream = _stream()
    st = _state()

    async def trickle() -> None:  # a piece every IDLE/4 (a wide margin for a loaded machine's
        # late wake-ups): 2.5 x IDLE in all
        for _ in range(10):
            await asyncio.sleep(IDLE / 4)
            stream.feed_data(b"y" * 10)
        stream.feed_eof()

    feeder = asyncio.create_task(trickle())
    started = asyncio.get_running_loop().time()
    body = await read_body(_request(stream, 100), st, 1 << 20, idle=IDLE)
    await feeder
    assert asyncio.get_running_loop().time() - started > 2 * IDLE
    assert bytes(body.data) == b"y" * 100
    assert body.result.size == 100


async def test_watchdog_times_out_only_without_progress() -> None:
    with pytest.raises(TimeoutError), IdleWatchdog(IDLE) as dog:
        for _ in range(4):
            await asyncio.sleep(IDLE / 2)
            dog.progress()
        await asyncio.sleep(IDLE * 3)
    assert dog.expired


async def test_outside_cancellation_is_not_a_timeout() -> None:
    async def guarded() -> None:
        with IdleWatchdog(10.0):
            await asyncio.sleep(10)

    task = asyncio.create_task(guarded())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_watchdog_leaves_no_timer_behind() -> None:
    with IdleWatchdog(IDLE) as dog:
        await asyncio.sleep(0)
    await asyncio.sleep(IDLE * 2)  # the timer was cancelled: the task is not cancelled later
    assert not dog.expired
