"""The native client against an HTTP server that answers something other than the gateway's JSON
(a proxy's page, another service on that port, a cut answer): every call raises RequestError of
s3kv's hierarchy (MalformedResponse, 502, for a 200), which a connector catches as S3KVError,
never the parser's KeyError, ValueError, TypeError or AttributeError."""

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


IDS = ["html", "other-json", "wrong-types", "not-an-object"]


@pytest.fixture(params=ANSWERS, ids=IDS)
async def impostor(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    async for url in _serving(*request.param, 200):
        yield url


@pytest.fixture(params=ANSWERS, ids=IDS)
async def failing_impostor(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """The same answers with status 500."""
    async for url in _serving(*request.param, 500):
        yield url


async def _serving(body: bytes, ctype: str, status: int) -> AsyncIterator[str]:
    async def answer(req: web.Request) -> web.Response:
        await req.read()
        return web.Response(body=body, content_type=ctype, status=status)

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


@pytest.mark.parametrize("name,call", CALLS, ids=[n for n, _ in CALLS])
async def test_an_error_answer_not_the_gateways_is_a_request_error(failing_impostor: str,
                                                                   name: str,
                                                                   call: Call) -> None:
    """A 500 whose body is no JSON object (a JSON list: ``doc.get`` raised AttributeError)."""
    async with S3KVClient(failing_impostor, direct_reads=False, timeout=5) as kv:
        with pytest.raises(RequestError) as exc:
            await call(kv)
    assert exc.value.status == 500, name


async def test_a_locate_answer_not_the_gateways_is_a_request_error(impostor: str) -> None:
    """Direct reads ask the gateway to locate the blocks first; a locate answered with HTML
    raised the JSON parser's ValueError."""
    async with S3KVClient(impostor, timeout=5) as kv:
        with pytest.raises(RequestError) as exc:
            await kv.get_many("ns", ["a"])
    assert exc.value.code in ("MalformedResponse", "MalformedLocate")
    assert exc.value.status == 502


async def test_stats_not_an_object_is_malformed_response(impostor: str) -> None:
    async with S3KVClient(impostor, direct_reads=False, timeout=5) as kv:
        try:
            doc = await kv.stats()
        except RequestError as exc:
            assert exc.code == "MalformedResponse"
        else:
            assert isinstance(doc, dict)
