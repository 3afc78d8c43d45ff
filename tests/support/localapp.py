"""An aiohttp application served on a free loopback port, for tests that drive a handler with
a raw socket (the connection's real transport, not a test client's)."""

from __future__ import annotations

from aiohttp import web


async def serve_locally(app: web.Application) -> tuple[web.AppRunner, int]:
    """``app`` listening on 127.0.0.1: its runner (the caller cleans it up) and the port."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]
