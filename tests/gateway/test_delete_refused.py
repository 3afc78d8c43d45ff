"""A delete the store cannot record is refused, S3's way, and the object stays (store.delete:
its tombstone is appended before the block leaves the index). Before, DeleteObject answered
204 while the backend was down, the object left this gateway's index, and the next restart, or
any replica, served it again. DeleteObject now answers 503 SlowDown with Retry-After,
DeleteObjects lists the key among its errors, the native delete answers 503; once the backend
is back, the same deletes succeed. In process, on an S3 store on the shared moto server: the
outage is marked on the store's backend health by hand, as a failed upload marks it
(stopping the server would leave the test to the timing of its detection)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json

from s3kv.config import Settings
from tests.support.localapp import front_on
from tests.support.s3server import MotoServer

DELETE_AB = (b'<Delete><Object><Key>a</Key></Object><Object><Key>b</Key></Object></Delete>')


async def request(port: int, method: str, path: str, body: bytes = b"",
                  headers: str = "") -> tuple[int, str, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n"
                 f"{headers}Connection: close\r\n\r\n".encode() + body)
    answer = await reader.read()
    writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), head.decode(), payload


async def delete_objects(port: int) -> tuple[int, bytes]:
    md5 = base64.b64encode(hashlib.md5(DELETE_AB).digest()).decode()
    status, _, body = await request(port, "POST", "/bkt?delete", DELETE_AB,
                                    f"Content-MD5: {md5}\r\n")
    return status, body


async def test_deletes_are_refused_while_the_store_cannot_record_them(
        s3_server: MotoServer, bucket: str) -> None:
    settings = Settings.load({"store": f"s3://{bucket}/gw?endpoint={s3_server.endpoint}",
                              "sync_interval": 0, "node_id": "deletes", "seal_after": 60})
    async with front_on(settings, "bkt") as (port, store):
        for key in ("a", "b"):
            assert (await request(port, "PUT", f"/bkt/{key}", key.encode() * 100))[0] == 200
        store.writer.health.mark_down("test: the backend is down")

        status, head, body = await request(port, "DELETE", "/bkt/a")
        assert status == 503 and b"<Code>SlowDown</Code>" in body
        assert "Retry-After:" in head
        status, body = await delete_objects(port)
        assert status == 200
        assert body.count(b"<Error>") == 2 and b"<Deleted>" not in body
        assert b"<Key>a</Key><Code>SlowDown</Code>" in body
        status, _, body = await request(port, "POST", "/v1/bkt/delete",
                                        json.dumps({"keys": ["a", "b"]}).encode())
        assert status == 503 and json.loads(body)["error"] == "SlowDown"
        for key in ("a", "b"):  # still there: nothing was deleted
            status, _, body = await request(port, "GET", f"/bkt/{key}")
            assert (status, body) == (200, key.encode() * 100)
        assert store.stats.deletes == 0

        store.writer.health.mark_up()
        assert (await request(port, "DELETE", "/bkt/a"))[0] == 204
        status, body = await delete_objects(port)
        assert status == 200 and b"<Error>" not in body and body.count(b"<Deleted>") == 2
        for key in ("a", "b"):
            assert (await request(port, "GET", f"/bkt/{key}"))[0] == 404
