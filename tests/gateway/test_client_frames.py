"""The native client's framed-response reader against a real HTTP server that sends broken
frames (a gateway cannot be made to send them, so a tiny aiohttp app stands in for it)."""

from __future__ import annotations

import json
import struct

import pytest
from aiohttp import web

from s3kv.client import S3KVClient
from s3kv.errors import RequestError


def _frames(index: list[dict[str, object]], payload: bytes) -> bytes:
    head = json.dumps({"blocks": index}).encode()
    return struct.pack("<I", len(head)) + head + payload


@pytest.mark.parametrize("body, ok", [
    (_frames([{"key": "a", "length": 3}, {"key": "b", "missing": True}], b"xyz"), True),
    (_frames([{"key": "a", "length": 5}], b"xyz"), False),         # truncated block
    (_frames([{"key": "a", "length": 3}], b"xyz!"), False),        # bytes after the last
    (struct.pack("<I", 99) + b"{}", False),                        # truncated index
    (_frames([{"key": "a"}], b""), False),                         # no length
])
async def test_framed_response(body: bytes, ok: bool, unused_tcp_port: int) -> None:
    async def handler(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/x-s3kv-frames")

    app = web.Application()
    app.router.add_post("/v1/ns/batch-get", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", unused_tcp_port)
    await site.start()
    try:
        async with S3KVClient(f"http://127.0.0.1:{unused_tcp_port}") as kv:
            if ok:
                assert await kv.get_many("ns", ["a", "b", "c"]) == [b"xyz", None, None]
            else:
                with pytest.raises(RequestError) as err:
                    await kv.get_many("ns", ["a"])
                assert err.value.code == "MalformedFrames"
    finally:
        await runner.cleanup()
