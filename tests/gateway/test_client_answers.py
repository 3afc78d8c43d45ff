"""The native client against an HTTP server that answers 200 with something other than the
gateway's JSON (a proxy's page, another service on that port, a cut answer): every call raises
RequestError (MalformedResponse, 502) of s3kv's hierarchy, which a connector catches as
S3KVError, never the parser's KeyError, ValueError or TypeError."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from s3kv.client import S3KVClient
from s3kv.errors import RequestError

ANSWERS = [(b"<html>welcome</html>", "text/html"), (b'{"unrelated": 1}', "application/json"),
           (b'{"present": [true], "stored": "x", "deleted": null, "created": 1, "keys": 5}',
            "application/json"), (b"[1, 2]", "application/json")]


@pytest.fixture(params=ANSWERS, ids=["html", "other-json", "wrong-types", "not-an-object"])
async def impostor(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    body, ctype = request.param

    async def answer(req: web.Request) -> web.Response:
        await req.read()
        return web.Response(body=body, content_type=ctype)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


Call = Callable[[S3KVClient], Awaitable[object]]
CALLS: list[tuple[str, Call]] = [
    ("lookup", lambda kv: kv.lookup("ns", ["a", "b"])),
    ("put_many", lambda kv: kv.put_many("ns", {"a": b"x"})),
    ("put_each", lambda kv: kv.put_each("ns", [("a", b"x")])),
    ("delete_many", lambda kv: kv.delete_many("ns", ["a"])),
    ("create_namespace", lambda kv: kv.create_namespace("ns")),
    ("list_keys", lambda kv: kv.list_keys("ns")),
]


@pytest.mark.parametrize("name,call", CALLS, ids=[n for n, _ in CALLS])
async def test_a_json_answer_not_the_gateways_is_malformed_response(impostor: str, name: str,
                                                                    call: Call) -> None:
    async with S3KVClient(impostor, direct_reads=False, timeout=5) as kv:
        with pytest.raises(RequestError) as exc:
            await call(kv)
    assert (exc.value.code, exc.value.status) == ("MalformedResponse", 502), name


async def test_stats_not_an_object_is_malformed_response(impostor: str) -> None:
    async with S3KVClient(impostor, direct_reads=False, timeout=5) as kv:
        try:
            doc = await kv.stats()
        except RequestError as exc:
            assert exc.code == "MalformedResponse"
        else:
            assert isinstance(doc, dict)
