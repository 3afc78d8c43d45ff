"""A bucket past the most the index can hold is refused with S3's TooManyBuckets, before
anything is written (s3kv/store/catalog.py). Real parts, in process (so that the limit can be
lowered from 65,535 to a few): the gateway's front on an S3 store on the shared moto server."""

from __future__ import annotations

import asyncio

import pytest

import s3kv.store.catalog as catalog
from s3kv.config import Settings
from tests.support.localapp import front_on
from tests.support.s3server import MotoServer

LIMIT = 3


async def request(port: int, method: str, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n"
                 "Connection: close\r\n\r\n".encode())
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_a_bucket_past_the_limit_is_refused_and_nothing_is_written(
        s3_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "MAX_NAMESPACE_ID", LIMIT)
    settings = Settings.load({"store": f"s3://{bucket}/gw?endpoint={s3_server.endpoint}",
                              "sync_interval": 0, "node_id": "limit"})
    async with front_on(settings, "first") as (port, store):
        for name in ("second", "third"):
            assert (await request(port, "PUT", f"/{name}"))[0] == 200
        status, body = await request(port, "PUT", "/fourth")
        assert status == 400 and b"<Code>TooManyBuckets</Code>" in body
        records = await store.backend.list_objects("gw/namespaces/")
        assert sorted(r.key for r in records) == [f"gw/namespaces/{n}.json"
                                                  for n in ("first", "second", "third")]
        assert (await request(port, "DELETE", "/second"))[0] == 204
        assert (await request(port, "PUT", "/fourth"))[0] == 200  # the freed id
        assert (await request(port, "PUT", "/fourth/k"))[0] == 200
