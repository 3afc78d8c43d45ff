"""Crashes, shutdowns and backend outages of a running gateway process.

- kill -9 after a flush, restart on the same store: every flushed block reads back byte for byte;
- SIGTERM after acknowledged write-back PUTs: exit 0, and after a restart everything
  acknowledged reads back;
- the backend server stopped: /healthz stays 200, /readyz turns 503, PUTs get 503 SlowDown with
  Retry-After within a bounded time, memory stays bounded, and service resumes by itself when
  the backend returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from s3kv.client import S3KVClient
from tests.conftest import make_s3_client
from tests.gateway.badinput import send, signed, signed_headers
from tests.gateway.conftest import (
    SMALL,
    TOKEN,
    Gateway,
    backend_store,
    gateway_client,
)
from tests.support.s3server import MotoServer

MiB = 1024 * 1024


@pytest.fixture
def gw_factory() -> Iterator[Any]:
    """Gateways of the test's own; all stopped at the end, whatever happened."""
    made: list[Gateway] = []

    def make(store: str, args: list[str]) -> Gateway:
        gw = Gateway(store, args)
        made.append(gw)
        gw.start()
        return gw

    try:
        yield make
    finally:
        for gw in made:
            gw.cleanup()


def _answer(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def _status(url: str) -> int:
    return _answer(url)[0]


def _blocks(n: int, seed: int) -> dict[str, bytes]:
    """Blocks of varied sizes (4 KiB .. 1.5 MiB, some unaligned) spanning several segments."""
    rnd = os.urandom
    sizes = [4096, 1, 100_000, 256 * 1024, 1536 * 1024, 777_777, 65_536 + 3]
    return {f"sess{seed}/{i:04d}": rnd(sizes[i % len(sizes)]) for i in range(n)}


def test_kill9_after_flush_loses_nothing_flushed(s3_server: MotoServer, gw_factory: Any) -> None:
    store = backend_store(s3_server)
    gw = gw_factory(store, [*SMALL, "--node-id", "crashy"])
    s3 = gateway_client(gw.endpoint)
    s3.create_bucket(Bucket="crash-ns")
    blocks = _blocks(30, 1)  # ~16 MiB: more than one 10 MiB segment
    for k, v in blocks.items():
        s3.put_object(Bucket="crash-ns", Key=k, Body=v)
    overwritten = os.urandom(5000)
    s3.put_object(Bucket="crash-ns", Key="sess1/0003", Body=overwritten)
    blocks["sess1/0003"] = overwritten
    s3.delete_object(Bucket="crash-ns", Key="sess1/0004")
    del blocks["sess1/0004"]

    async def native_put_and_flush() -> None:
        async with S3KVClient(gw.endpoint, token=TOKEN) as kv:
            extra = {f"native/{i}": os.urandom(200_000) for i in range(5)}
            assert await kv.put_many("crash-ns", extra) == 5
            blocks.update(extra)
            await kv.flush()

    asyncio.run(native_put_and_flush())
    # written after the flush and never flushed: may or may not survive; it must not corrupt
    s3.put_object(Bucket="crash-ns", Key="late/unflushed", Body=b"late" * 1000)
    gw.kill()  # kill -9

    gw2 = gw_factory(store, [*SMALL, "--node-id", "crashy"])
    s3 = gateway_client(gw2.endpoint)
    assert "crash-ns" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    for k, v in blocks.items():
        got = s3.get_object(Bucket="crash-ns", Key=k)["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(v).digest(), k
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="crash-ns", Key="sess1/0004")
    listed = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket="crash-ns")
              for o in p.get("Contents", [])]
    assert set(blocks) <= set(listed) <= set(blocks) | {"late/unflushed"}
    r = signed("GET", f"{gw2.endpoint}/crash-ns/late/unflushed")
    assert r.status in (200, 404)
    if r.status == 200:
        assert r.body == b"late" * 1000

    async def native_read() -> None:
        async with S3KVClient(gw2.endpoint, token=TOKEN) as kv:
            keys = sorted(blocks)
            got = await kv.get_many("crash-ns", keys)
            assert got == [blocks[k] for k in keys]

    asyncio.run(native_read())


def test_sigterm_keeps_everything_acknowledged(s3_server: MotoServer, gw_factory: Any) -> None:
    store = backend_store(s3_server)
    # a long seal deadline: every block is still only in memory when SIGTERM arrives
    args = [*SMALL, "--seal-after", "60"]
    gw = gw_factory(store, args)
    s3 = gateway_client(gw.endpoint)
    s3.create_bucket(Bucket="term-ns")
    blocks = _blocks(25, 2)
    acked: dict[str, bytes] = {}
    for k, v in blocks.items():
        resp = s3.put_object(Bucket="term-ns", Key=k, Body=v)
        assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200
        acked[k] = v
    stats = json.loads(send("GET", gw.endpoint + "/v1/stats",
                            headers={"Authorization": f"Bearer {TOKEN}"}).body)
    assert stats["open_segment_bytes"] > 0  # write-back: not yet on the backend
    assert gw.terminate() == 0
    assert "gateway.stopped" in gw.log_text()

    gw2 = gw_factory(store, args)
    s3 = gateway_client(gw2.endpoint)
    for k, v in acked.items():
        assert s3.get_object(Bucket="term-ns", Key=k)["Body"].read() == v, k
    assert gw2.terminate() == 0


def test_sigterm_while_writes_are_in_flight(s3_server: MotoServer, gw_factory: Any) -> None:
    """Writers keep going while SIGTERM arrives: every PUT that got a 200 survives."""
    store = backend_store(s3_server)
    gw = gw_factory(store, SMALL)
    s3 = gateway_client(gw.endpoint)
    s3.create_bucket(Bucket="race-ns")
    acked: dict[str, bytes] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(w: int) -> None:
        client = gateway_client(gw.endpoint)
        i = 0
        while not stop.is_set():
            key, data = f"w{w}/{i}", os.urandom(150_000)
            i += 1
            try:
                resp = client.put_object(Bucket="race-ns", Key=key, Body=data)
            except Exception:
                continue  # refused or connection closed by the shutdown: not acknowledged
            if resp["ResponseMetadata"]["HTTPStatusCode"] == 200:
                with lock:
                    acked[key] = data

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(writer, w) for w in range(4)]
        time.sleep(1.5)
        t0 = time.monotonic()
        code = gw.terminate()
        took = time.monotonic() - t0
        stop.set()
        for f in futures:
            f.result()
    assert code == 0
    assert took < 15, f"SIGTERM took {took:.1f} s with writers still connected"
    assert len(acked) > 10
    gw2 = gw_factory(store, SMALL)
    s3 = gateway_client(gw2.endpoint)
    for k, v in acked.items():
        assert s3.get_object(Bucket="race-ns", Key=k)["Body"].read() == v, k


def test_sigterm_lets_an_upload_in_progress_finish(s3_server: MotoServer,
                                                   gw_factory: Any) -> None:
    """Headers in, SIGTERM, then the body: the upload completes (200), the gateway exits 0 at
    once (not after a shutdown timeout), and the block is there after a restart."""
    store = backend_store(s3_server)
    gw = gw_factory(store, [*SMALL, "--seal-after", "60"])
    gateway_client(gw.endpoint).create_bucket(Bucket="drain-ns")
    body = os.urandom(300_000)
    url = f"{gw.endpoint}/drain-ns/k1"
    hdrs = signed_headers("PUT", url, body=body, headers={"Content-Length": str(len(body))})
    head = "PUT /drain-ns/k1 HTTP/1.1\r\n" + f"Host: 127.0.0.1:{gw.port}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in hdrs.items() if k.lower() != "host") + "\r\n"
    with socket.create_connection(("127.0.0.1", gw.port), timeout=20) as sock:
        sock.sendall(head.encode() + body[:1000])
        time.sleep(0.3)
        assert gw.proc is not None
        gw.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        sock.sendall(body[1000:])
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:200]
    t0 = time.monotonic()
    assert gw.proc.wait(timeout=30) == 0
    assert time.monotonic() - t0 < 10
    gw.proc = None
    gw2 = gw_factory(store, SMALL)
    assert gateway_client(gw2.endpoint).get_object(Bucket="drain-ns",
                                                   Key="k1")["Body"].read() == body


def test_backend_outage(private_s3_server: MotoServer, gw_factory: Any) -> None:
    server = private_s3_server
    bucket = f"out-{uuid.uuid4().hex[:8]}"
    store = backend_store(server, bucket)
    gw = gw_factory(store, [*SMALL, "--backend-timeout", "3"])
    s3 = gateway_client(gw.endpoint)
    s3.create_bucket(Bucket="nsp")
    s3.put_object(Bucket="nsp", Key="before", Body=b"b" * 1000)
    assert _status(gw.endpoint + "/readyz") == 200
    send("POST", gw.endpoint + "/v1/flush", headers={"Authorization": f"Bearer {TOKEN}"})

    server.stop()
    t0 = time.monotonic()
    # PUTs keep coming; within a bounded time they are refused with 503 SlowDown + Retry-After
    slowdown = None
    i = 0
    while time.monotonic() - t0 < 40:
        r = signed("PUT", f"{gw.endpoint}/nsp/during/{i}", body=os.urandom(512 * 1024))
        i += 1
        assert r.status in (200, 503), (r.status, r.body[:300])
        if r.status == 503:
            slowdown = r
            break
    elapsed = time.monotonic() - t0
    assert slowdown is not None, "PUTs were never refused while the backend was down"
    assert slowdown.code == "SlowDown"
    assert int(slowdown.headers["Retry-After"]) >= 1
    assert elapsed < 30, elapsed
    assert _status(gw.endpoint + "/healthz") == 200
    assert _status(gw.endpoint + "/readyz") == 503

    # a burst of writers while it is down: all refused quickly, memory stays bounded
    def hammer(w: int) -> list[int]:
        codes = []
        for j in range(15):
            r = signed("PUT", f"{gw.endpoint}/nsp/burst/{w}/{j}", body=b"\0" * MiB)
            codes.append(r.status)
        return codes

    t1 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        codes = [c for cs in pool.map(hammer, range(8)) for c in cs]
    assert set(codes) == {503}, set(codes)
    assert time.monotonic() - t1 < 30
    rss = gw.rss_bytes()
    assert rss < 600 * MiB, rss / MiB
    # reads still answer: the block flushed before the outage is there but cannot be read now:
    # 503 ServiceUnavailable with Retry-After (an S3 client retries it), never 404 NoSuchKey
    r = signed("GET", f"{gw.endpoint}/nsp/before")
    assert (r.status, r.code) == (503, "ServiceUnavailable"), (r.status, r.body[:300])
    assert int(r.headers["Retry-After"]) >= 1
    assert _status(gw.endpoint + "/healthz") == 200

    # the backend returns (moto comes back empty): recreate the bucket; no gateway restart
    server.start()
    make_s3_client(server.endpoint).create_bucket(Bucket=bucket)
    t2 = time.monotonic()
    ok = None
    while time.monotonic() - t2 < 30:
        r = signed("PUT", f"{gw.endpoint}/nsp/after", body=b"after" * 100)
        if r.status == 200:
            ok = r
            break
        assert (r.status, r.code) == (503, "SlowDown"), (r.status, r.body[:300])
        time.sleep(0.5)
    assert ok is not None, "PUTs did not resume after the backend returned"
    deadline = time.monotonic() + 15
    while _status(gw.endpoint + "/readyz") != 200 and time.monotonic() < deadline:
        time.sleep(0.3)
    ready = _answer(gw.endpoint + "/readyz")
    assert ready[0] == 200, ready[1]  # the body names what is not ready
    r = send("POST", gw.endpoint + "/v1/flush", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status == 200, r.body
    assert s3.get_object(Bucket="nsp", Key="after")["Body"].read() == b"after" * 100
    objs = make_s3_client(server.endpoint).list_objects_v2(Bucket=bucket)
    assert objs["KeyCount"] >= 2  # a segment and its sidecar reached the new backend
