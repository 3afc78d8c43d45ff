"""An aiohttp application, or the gateway's front, served on a free loopback port, for tests that
drive a handler with a raw socket (the connection's real transport, not a test client's)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from s3kv.config import Settings
from s3kv.gateway.server import start_front
from s3kv.store.store import BlockStore


async def serve_locally(app: web.Application) -> tuple[web.AppRunner, int]:
    """``app`` listening on 127.0.0.1: its runner (the caller cleans it up) and the port."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


@asynccontextmanager
async def front_on(settings: Settings, namespace: str) -> AsyncIterator[tuple[int, BlockStore]]:
    """The gateway's front (``start_front``: the plain lane, aiohttp's handler) on a store
    opened with ``settings`` and a namespace in it, listening on a free loopback port, in this
    process (so that tests may shorten its timeouts): (port, store), all stopped after."""
    store = await BlockStore.open(settings)
    await store.create_namespace(namespace)
    runner, front = await start_front(store, settings)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(front, sock)
    await site.start()
    try:
        yield sock.getsockname()[1], store
    finally:
        await site.stop()
        await front.cleanup()
        await runner.cleanup()
        await store.close()
