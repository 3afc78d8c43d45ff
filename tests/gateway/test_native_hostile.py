"""Hostile input to the native API (/v1) over HTTP: each a clear 4xx with the project's error
codes, never a 500, and nothing of a refused batch stored."""

from __future__ import annotations

import json

import pytest

from tests.gateway.badinput import assert_healthy, send
from tests.gateway.conftest import GW_ACCESS, GW_SECRET, Gateway

#: during every test here the gateway answers no request with a 5xx other than 503
pytestmark = pytest.mark.usefixtures("no_server_errors")

AUTH = {"Authorization": f"Bearer {GW_ACCESS}:{GW_SECRET}"}


def _error(gateway: Gateway, path: str, body: bytes, headers: dict[str, str] | None = None
           ) -> tuple[int, str]:
    r = send("POST", f"{gateway.endpoint}{path}", body=body, headers={**AUTH, **(headers or {})})
    return r.status, json.loads(r.body).get("error", "")


@pytest.mark.parametrize("op", ["lookup", "batch-get", "delete", "list"])
def test_deeply_nested_json_is_invalid_argument(gateway: Gateway, gw_bucket: str,
                                                op: str) -> None:
    """JSON nested deeper than the parser recurses (a few KiB of brackets) was a 500."""
    for body in (b"[" * 100_000 + b"]" * 100_000, b'{"keys": ' + b"[" * 5000 + b"]" * 5000
                 + b"}"):
        assert _error(gateway, f"/v1/{gw_bucket}/{op}", body) == (400, "InvalidArgument")
    assert_healthy(gateway)


def _framed(head: bytes, data: bytes) -> bytes:
    return len(head).to_bytes(4, "little") + head + data


FRAMES = {"Content-Type": "application/x-s3kv-frames"}
MiB = 1024 * 1024


@pytest.mark.parametrize("entry,stored_as", [
    ('{"key": 5, "length": 1}', "5"), ('{"key": null, "length": 1}', "None"),
    ('{"key": "s", "length": "1"}', "s"), ('{"key": "f", "length": 1.9}', "f"),
    ('{"key": "t", "length": true}', "t"), ('{"key": "i", "length": 1e400}', "i"),
    ('["x", 1]', "x")])
@pytest.mark.parametrize("size", [1, MiB])  # read whole, or its head first (a landing)
def test_batch_put_head_of_wrong_types_is_malformed_frames(gateway: Gateway, gw_bucket: str,
                                                           entry: str, stored_as: str,
                                                           size: int) -> None:
    """A key that is not a string was stored under its str() ("None" for null), a length that
    is not an integer was int()ed (1.9 stored one byte, true one, "1" one) and an infinite one
    was a 500: each is now MalformedFrames, and nothing is stored."""
    head = f'{{"blocks": [{entry}, {{"key": "after", "length": {size - 1}}}]}}'.encode()
    status_code = _error(gateway, f"/v1/{gw_bucket}/batch-put", _framed(head, b"x" * size),
                         FRAMES)
    assert status_code == (400, "MalformedFrames")
    r = send("POST", f"{gateway.endpoint}/v1/{gw_bucket}/lookup", headers=AUTH,
             body=json.dumps({"keys": [stored_as, "after"]}).encode())
    assert json.loads(r.body)["present"] == [False, False]


@pytest.mark.parametrize("size", [1, MiB])
def test_batch_put_head_nested_too_deep_is_malformed_frames(gateway: Gateway, gw_bucket: str,
                                                            size: int) -> None:
    body = _framed(b"[" * 100_000, b"x" * size)
    assert _error(gateway, f"/v1/{gw_bucket}/batch-put", body, FRAMES) == \
        (400, "MalformedFrames")
    assert_healthy(gateway)


@pytest.mark.parametrize("doc", [b'{"prefix": "\\ud800"}', b'{"after": "a\\udfff"}'])
def test_list_with_a_lone_surrogate_is_invalid_argument(gateway: Gateway, gw_bucket: str,
                                                        doc: bytes) -> None:
    """JSON lets a string carry a lone surrogate, which no UTF-8 encodes: it was a 500."""
    assert _error(gateway, f"/v1/{gw_bucket}/list", doc) == (400, "InvalidArgument")


def test_batch_put_of_more_than_4096_blocks_is_refused(gateway: Gateway,
                                                       gw_bucket: str) -> None:
    """The native API takes at most 4096 keys per request: a batch put of more was stored
    whole (300,000 empty blocks held the event loop for seconds, and a head of millions grew
    the gateway by gigabytes). It is MalformedFrames now, nothing stored; 4096 are fine."""
    def body(n: int) -> bytes:
        head = json.dumps({"blocks": [{"key": f"many/{i}", "length": 0} for i in range(n)]})
        return _framed(head.encode(), b"")

    assert _error(gateway, f"/v1/{gw_bucket}/batch-put", body(4097), FRAMES) == \
        (400, "MalformedFrames")
    r = send("POST", f"{gateway.endpoint}/v1/{gw_bucket}/lookup", headers=AUTH,
             body=json.dumps({"keys": ["many/0", "many/4096"]}).encode())
    assert json.loads(r.body)["present"] == [False, False]
    r = send("POST", f"{gateway.endpoint}/v1/{gw_bucket}/batch-put", body=body(4096),
             headers={**AUTH, **FRAMES})
    assert (r.status, json.loads(r.body)) == (200, {"stored": 4096})


def test_batch_put_head_over_16_mib_is_refused(gateway: Gateway, gw_bucket: str) -> None:
    """A head no batch of 4096 keys needs (padding, here) was parsed whatever its size."""
    head = json.dumps({"blocks": [{"key": "pad/1", "length": 1}],
                       "pad": "x" * (17 * MiB)}).encode()
    assert _error(gateway, f"/v1/{gw_bucket}/batch-put", _framed(head, b"x"), FRAMES) == \
        (400, "MalformedFrames")
    r = send("POST", f"{gateway.endpoint}/v1/{gw_bucket}/lookup", headers=AUTH,
             body=json.dumps({"keys": ["pad/1"]}).encode())
    assert json.loads(r.body)["present"] == [False]
