"""The native API's namespace create, delete and list (docs/api.md), against a real gateway."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from s3kv.client import S3KVClient
from s3kv.errors import InvalidInput, NamespaceNotFound
from tests.gateway.conftest import TOKEN, Gateway


def _call(gw: Gateway, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(gw.endpoint + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


async def test_create_is_idempotent_and_delete_and_list_work(gateway: Gateway) -> None:
    ns = f"adm-{uuid.uuid4().hex[:10]}"
    async with S3KVClient(gateway.endpoint, token=TOKEN) as kv:
        with pytest.raises(NamespaceNotFound):
            await kv.lookup(ns, ["a"])
        assert await kv.create_namespace(ns) is True
        assert await kv.create_namespace(ns) is False
        await kv.put_many(ns, {f"p/{i:03d}": b"x" * 10 for i in range(12)} | {"q/1": b"y"})
        assert await kv.list_keys(ns, "p/", limit=5) == [f"p/{i:03d}" for i in range(5)]
        assert await kv.list_keys(ns, "p/", after="p/009") == ["p/010", "p/011"]
        assert await kv.delete_many(ns, ["p/000", "p/001", "absent"]) == 2
        assert await kv.lookup(ns, ["p/000", "p/002"]) == (0, [False, True])
        assert "p/000" not in await kv.list_keys(ns)


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("PUT", "/v1/metrics", None, 400, "InvalidBucketName"),
    ("PUT", "/v1/Bad_Name", None, 400, "InvalidBucketName"),
    ("POST", "/v1/nosuchns-xyz/delete", {"keys": ["a"]}, 404, "NoSuchBucket"),
    ("POST", "/v1/nosuchns-xyz/list", {}, 404, "NoSuchBucket"),
])
def test_bad_admin_requests(gateway: Gateway, method: str, path: str, body: Any, status: int,
                            code: str) -> None:
    got, doc = _call(gateway, method, path, body)
    assert (got, doc["error"]) == (status, code)


async def test_bad_list_and_delete_arguments(gateway: Gateway) -> None:
    ns = f"adm-{uuid.uuid4().hex[:10]}"
    async with S3KVClient(gateway.endpoint, token=TOKEN) as kv:
        await kv.create_namespace(ns)
    for body in ({"limit": 0}, {"limit": 5000}, {"prefix": 3}, {"limit": True}, ["x"]):
        status, doc = _call(gateway, "POST", f"/v1/{ns}/list", body)
        assert (status, doc["error"]) == (400, "InvalidArgument"), body
    status, doc = _call(gateway, "POST", f"/v1/{ns}/delete", {"keys": ["../x"]})
    assert (status, doc["error"]) == (400, "InvalidArgument")
    async with S3KVClient(gateway.endpoint, token=TOKEN) as kv:
        with pytest.raises(InvalidInput):
            await kv.list_keys(ns, limit=0)
