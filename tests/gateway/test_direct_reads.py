"""Direct reads (``s3kv serve --direct-reads``): the native client reads blocks the gateway
locates in sealed segments straight from the S3 server with presigned ranged GETs, checks each
against its CRC, and reads the rest through the gateway; what a direct read cannot deliver
(corrupt, evicted) is asked of the gateway, which answers a miss. A real gateway process on a
real S3 server (moto, and RGW under ``--rgw``), the real client over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from s3kv.client import S3KVClient
from s3kv.client_direct import DirectReads
from s3kv.client_io import BlockBody
from tests.conftest import S3_SERVERS, make_s3_client, s3_server_for
from tests.gateway.conftest import SMALL, TOKEN, Gateway, running_gateway, store_stats
from tests.support.s3server import free_port

KiB, MiB = 1024, 1024 * 1024


@pytest.fixture(scope="module", params=S3_SERVERS)
def direct(request: pytest.FixtureRequest) -> Iterator[tuple[Gateway, str]]:
    """A gateway with direct reads on, without a DRAM tier, and its backend bucket."""
    server = s3_server_for(request, request.param)
    bucket = f"gw-{uuid.uuid4().hex[:12]}"
    make_s3_client(server.endpoint).create_bucket(Bucket=bucket)
    store = f"s3://{bucket}/kv?endpoint={server.endpoint}"
    with running_gateway(store, [*SMALL, "--direct-reads", "60"]) as gw:
        yield gw, bucket


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _write(endpoint: str, ns: str, blocks: dict[str, bytes], *, seal: bool = True) -> None:
    async def go() -> None:
        async with S3KVClient(endpoint, token=TOKEN) as kv:
            await kv.create_namespace(ns)
            assert await kv.put_many(ns, blocks) == len(blocks)
            if seal:
                await kv.flush()
    _run(go())


def _read(endpoint: str, ns: str, keys: list[str], **kw: Any) -> list[bytes | None]:
    async def go() -> list[bytes | None]:
        async with S3KVClient(endpoint, token=TOKEN, **kw) as kv:
            return await kv.get_many(ns, keys)
    result: list[bytes | None] = _run(go())
    return result


def _delta(after: dict[str, Any], before: dict[str, Any], key: str) -> float:
    return float(after[key] - before[key])


def test_sealed_blocks_are_read_from_the_server_and_the_rest_through_the_gateway(
        direct: tuple[Gateway, str]) -> None:
    gw, _ = direct
    ns = f"d-{uuid.uuid4().hex[:8]}"
    sealed = {f"chain/{i:03d}": os.urandom(256 * KiB + i) for i in range(24)}
    sealed["big"] = os.urandom(3 * MiB)
    _write(gw.endpoint, ns, sealed)
    fresh = {f"open/{i}": os.urandom(100 * KiB) for i in range(3)}  # still in the open segment
    _write(gw.endpoint, ns, fresh, seal=False)
    keys = [*sealed, "absent", *fresh]
    before = store_stats(gw.endpoint)
    got = _read(gw.endpoint, ns, keys)
    after = store_stats(gw.endpoint)
    assert got == [*sealed.values(), None, *fresh.values()]
    assert _delta(after, before, "direct_located") == len(sealed)
    assert _delta(after, before, "backend_reads") == 0  # the gateway read none of them
    # without direct reads the same client reads them through the gateway
    before = store_stats(gw.endpoint)
    assert _read(gw.endpoint, ns, list(sealed), direct_reads=False) == list(sealed.values())
    after = store_stats(gw.endpoint)
    assert _delta(after, before, "direct_located") == 0
    assert _delta(after, before, "backend_reads") >= 1


def _segments(bucket: str, endpoint: str) -> list[str]:
    s3 = make_s3_client(endpoint)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="kv/segments/").get("Contents", [])
    return [o["Key"] for o in listed]


def _written_alone(direct: tuple[Gateway, str], blocks: dict[str, bytes]
                   ) -> tuple[str, str, str]:
    """``blocks`` written and sealed in a segment of their own: (namespace, the S3 server's
    endpoint, that segment's key)."""
    gw, bucket = direct
    endpoint = gw.store.split("endpoint=", 1)[1]
    ns = f"s-{uuid.uuid4().hex[:8]}"
    before = set(_segments(bucket, endpoint))
    _write(gw.endpoint, ns, blocks)
    (segment,) = set(_segments(bucket, endpoint)) - before
    return ns, endpoint, segment


def test_a_corrupt_block_is_a_miss_and_its_neighbours_arrive(
        direct: tuple[Gateway, str]) -> None:
    gw, bucket = direct
    blocks = {f"k/{i}": os.urandom(64 * KiB) for i in range(8)}
    ns, endpoint, segment = _written_alone(direct, blocks)
    s3 = make_s3_client(endpoint)
    data = bytearray(s3.get_object(Bucket=bucket, Key=segment)["Body"].read())
    i = data.find(blocks["k/3"][:64])
    assert i >= 0
    data[i + 1000] ^= 0xFF  # one byte of k/3 flipped in the segment object
    s3.put_object(Bucket=bucket, Key=segment, Body=bytes(data))
    before = store_stats(gw.endpoint)
    got = _read(gw.endpoint, ns, list(blocks))
    after = store_stats(gw.endpoint)
    assert got == [None if k == "k/3" else v for k, v in blocks.items()]
    # the client asked the gateway for k/3 alone, which found it corrupt too and dropped it
    assert _delta(after, before, "checksum_failures") == 1
    assert _delta(after, before, "direct_located") == len(blocks)


def test_an_empty_block_is_located_through_the_gateway(direct: tuple[Gateway, str]) -> None:
    """An empty block has no bytes to read: ``locate`` sends it through the gateway (a
    zero-length ranged GET is no valid range), which answers it without a backend read."""
    gw, _ = direct
    ns = f"e-{uuid.uuid4().hex[:8]}"
    blocks = {"a": os.urandom(20 * KiB), "empty": b"", "b": os.urandom(20 * KiB)}
    _write(gw.endpoint, ns, blocks)
    before = store_stats(gw.endpoint)
    assert _read(gw.endpoint, ns, list(blocks)) == list(blocks.values())
    after = store_stats(gw.endpoint)
    assert _delta(after, before, "direct_located") == 2
    assert _delta(after, before, "hits") == 1  # the empty block, through the gateway


def test_a_segment_gone_after_locate_makes_misses_not_errors(
        direct: tuple[Gateway, str]) -> None:
    gw, bucket = direct
    blocks = {f"k/{i}": os.urandom(32 * KiB) for i in range(4)}
    ns, endpoint, segment = _written_alone(direct, blocks)
    make_s3_client(endpoint).delete_object(Bucket=bucket, Key=segment)  # as if evicted
    assert _read(gw.endpoint, ns, list(blocks)) == [None] * len(blocks)


def test_locate_answers_urls_a_plain_http_get_can_use(direct: tuple[Gateway, str]) -> None:
    """(RGW checks the URL's signature; moto does not: tests/warp/test_sigv4.py checks it
    against the gateway's own verifier, tampering included.)"""
    gw, _ = direct
    ns = f"u-{uuid.uuid4().hex[:8]}"
    block = os.urandom(5000)
    _write(gw.endpoint, ns, {"one": block})

    async def go() -> dict[str, Any]:
        import aiohttp

        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as s:
            async with s.post(f"{gw.endpoint}/v1/{ns}/locate",
                              json={"keys": ["one", "nope"]}) as resp:
                assert resp.status == 200
                doc: dict[str, Any] = await resp.json()
            slot, offset, length, _crc = doc["blocks"][0]
            async with aiohttp.ClientSession() as plain, plain.get(
                    doc["urls"][slot],
                    headers={"Range": f"bytes={offset}-{offset + length - 1}"}) as resp:
                assert resp.status == 206
                assert await resp.read() == block
            return doc
    doc = _run(go())
    assert doc["blocks"][1] is None
    assert doc["expires"] > 0


def _locates(gw: Gateway) -> float:
    """The gateway's ``locate`` requests so far, any status (its /metrics)."""
    text = urllib.request.urlopen(gw.endpoint + "/metrics", timeout=5).read().decode()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith('s3kv_requests_total{op="NativeLocate"'))


def _refused_locate(gw: Gateway) -> tuple[str, dict[str, bytes]]:
    """Three blocks written to a fresh namespace, whose ``locate`` the gateway answers
    ``501 NotImplemented``: (the namespace, the blocks)."""
    ns = f"n-{uuid.uuid4().hex[:8]}"
    blocks = {f"k/{i}": os.urandom(10 * KiB) for i in range(3)}
    _write(gw.endpoint, ns, blocks)
    req = urllib.request.Request(f"{gw.endpoint}/v1/{ns}/locate", method="POST",
                                 data=b'{"keys": ["k/0"]}',
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 501
    assert json.loads(info.value.read())["error"] == "NotImplemented"
    return ns, blocks


def test_a_gateway_without_direct_reads_answers_501_and_is_not_asked_again(
        gateway: Gateway) -> None:
    ns, blocks = _refused_locate(gateway)
    before = _locates(gateway)

    async def go() -> None:
        async with S3KVClient(gateway.endpoint, token=TOKEN) as kv:
            for _ in range(3):
                assert await kv.get_many(ns, list(blocks)) == list(blocks.values())
    _run(go())
    assert _locates(gateway) - before == 1  # asked once, then read through it


async def test_a_server_out_of_reach_sends_every_block_to_the_gateway() -> None:
    """The client side alone: a locate answer naming a port nothing listens on (no gateway is
    needed to produce one); every position comes back to be read through the gateway, nothing
    reaches the sink, and direct reads stay off for that gateway (``OFF_FOR``)."""
    port = free_port()
    doc = {"expires": 0, "urls": [f"http://127.0.0.1:{port}/b/kv/segments/s.seg?X-Amz-x=1"],
           "blocks": [[0, 0, 100, 1], [0, 4096, 100, 2], "gateway", None]}
    reads = DirectReads(timeout=5.0)
    delivered: list[int] = []

    async def sink(i: int, body: BlockBody | None) -> None:
        delivered.append(i)

    async def locate() -> bytes:
        return json.dumps(doc).encode()

    done = [False] * 4
    left = await reads.fetch("http://gw", [0, 1, 2, 3], locate, sink, done)
    reads.close()
    assert left == [0, 1, 2]
    assert delivered == [3]  # the miss, told as such
    assert done == [False] * 4
    assert not reads.wanted("http://gw") and reads.wanted("http://other")


async def test_a_server_that_never_answers_the_connect_is_given_up_on_quickly() -> None:
    """A backend the client's packets reach but that never completes the connection (here: a
    listening socket whose backlog is full) costs the connect timeout, not the read timeout."""
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filling = []  # connections that fill the backlog (however many the kernel queues)
    for _ in range(4):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        filling.append(sock)
    doc = {"expires": 0, "urls": [f"http://127.0.0.1:{port}/b/kv/segments/s.seg?X-Amz-x=1"],
           "blocks": [[0, 0, 100, 1]]}
    reads = DirectReads(timeout=60.0, connect_timeout=0.5)

    async def sink(i: int, body: BlockBody | None) -> None:
        raise AssertionError("nothing arrives")

    async def locate() -> bytes:
        return json.dumps(doc).encode()

    began = time.monotonic()
    try:
        left = await reads.fetch("http://gw", [0], locate, sink, [False])
    finally:
        reads.close()
        for sock in filling:
            sock.close()
        listener.close()
    assert left == [0]
    assert time.monotonic() - began < 5
    assert not reads.wanted("http://gw")


def test_direct_reads_on_a_file_store_answer_501_and_reads_go_through_the_gateway(
        tmp_path: Path) -> None:
    """``--direct-reads`` where the backend cannot sign URLs (the file backend): locate answers
    501 like a gateway without it, and the client reads through the gateway."""
    with running_gateway(f"file://{tmp_path}", [*SMALL, "--direct-reads", "60"]) as gw:
        ns, blocks = _refused_locate(gw)
        assert _read(gw.endpoint, ns, list(blocks)) == list(blocks.values())
