"""Native batch puts received straight into their segment (store/landing.py, takeover.py's
BodyLanding with the body's head read first): on the file backend the transport reads the
blocks of a batch into windows of the segment's file, one after another at aligned offsets
(across two segments when the batch does not fit one), so every block must come back byte for
byte from the open segment, the sealed one and after a restart; a batch refused, malformed or
cut short must store nothing and must not keep its segment from sealing; a request pipelined
after a landed batch is parsed as before.

Real parts: a gateway process on a file:// store, the native client and a raw socket."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from s3kv.client import S3KVClient
from s3kv.frames import encode_frames
from s3kv.sizes import KiB, MiB
from s3kv.wire import landrecv
from tests.support.gateway import Gateway, metric, running_gateway, store_stats

ARGS = ["--segment-size", "64MiB", "--part-size", "8MiB", "--max-block-size", "32MiB",
        "--sync-interval", "0", "--dram-cache", "0"]
NS = "batches"


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    with running_gateway(f"file://{tmp_path}/store", ARGS, credentials=False) as g:
        asyncio.run(_create(g))
        yield g


async def _create(gw: Gateway) -> None:
    async with S3KVClient(gw.endpoint) as kv:
        await kv.create_namespace(NS)


def _put(gw: Gateway, blocks: list[tuple[str, bytes]]) -> int:
    async def run() -> int:
        async with S3KVClient(gw.endpoint, timeout=120) as kv:
            return await kv.put_many(NS, blocks)
    return asyncio.run(run())


def _get(gw: Gateway, keys: list[str]) -> list[bytes | None]:
    async def run() -> list[bytes | None]:
        async with S3KVClient(gw.endpoint, timeout=120) as kv:
            return await kv.get_many(NS, keys)
    return asyncio.run(run())


def _landed(gw: Gateway, *, flush: bool = False) -> int:
    return int(store_stats(gw.endpoint, flush=flush)["blocks_landed"])


def test_batches_land_and_read_back_open_sealed_and_after_restart(gw: Gateway) -> None:
    # unaligned lengths (alignment gaps between the blocks), across 8 MiB parts
    first = [(f"a/{i}", os.urandom(n)) for i, n in
             enumerate((64 * KiB + 1, 300_000, 1 * MiB + 17, 256 * KiB, 256 * KiB, 5 * MiB + 4095))]
    # 90 MiB: does not fit one 64 MiB segment, so it lands in two
    second = [(f"b/{i}", os.urandom(30 * MiB)) for i in range(3)]
    # a block under 64 KiB: the batch is appended, not landed
    third = [("c/small", os.urandom(1000)), ("c/large", os.urandom(2 * MiB))]
    blocks = first + second + third
    for batch in (first, second, third):
        assert _put(gw, batch) == len(batch)
    keys = [k for k, _ in blocks]
    want = [d for _, d in blocks]
    assert _get(gw, keys) == want  # from the open segments
    assert _landed(gw, flush=True) == len(first) + len(second)
    assert _get(gw, keys) == want  # from the sealed segments' files
    gw.stop()
    gw.start()
    assert _get(gw, keys) == want  # the index rebuilt from the manifests


def _raw(gw: Gateway) -> socket.socket:
    host, port = gw.endpoint.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _batch_head(length: int, extra: str = "") -> bytes:
    return (f"POST /v1/{NS}/batch-put HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
            f"Content-Type: application/x-s3kv-frames\r\n{extra}\r\n").encode()


def _framed(blocks: list[tuple[str, bytes]]) -> bytes:
    return b"".join(bytes(p) for p in encode_frames(blocks))


def _answer(reader: BinaryIO) -> tuple[str, bytes]:
    """One answer read off the connection (``sock.makefile("rb")``: answers that arrive in
    one read are each read whole, the next one left for the next call)."""
    status = reader.readline().decode().rstrip("\r\n")
    length = 0
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, reader.read(length)


def _nothing_stored(gw: Gateway, keys: list[str]) -> None:
    assert _get(gw, keys) == [None] * len(keys)


def test_a_refused_batch_stores_nothing_and_its_segment_still_seals(gw: Gateway) -> None:
    blocks = [(f"bad/{i}", os.urandom(512 * KiB)) for i in range(8)]
    body = _framed(blocks)
    wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
    with _raw(gw) as sock:
        sock.sendall(_batch_head(len(body), f"Content-MD5: {wrong}\r\n") + body)
        status, answer = _answer(sock.makefile("rb"))
    assert status.startswith("HTTP/1.1 400") and b"BadDigest" in answer
    good = [("good", os.urandom(2 * MiB))]
    assert _put(gw, good) == 1
    assert _landed(gw, flush=True) == 1  # returns: the given-up blocks did not hold the seal
    _nothing_stored(gw, [k for k, _ in blocks])
    assert _get(gw, ["good"]) == [good[0][1]]


def test_a_head_that_does_not_add_up_is_malformed_and_stores_nothing(gw: Gateway) -> None:
    blocks = [(f"odd/{i}", os.urandom(1 * MiB)) for i in range(3)]
    doc = json.dumps({"blocks": [{"key": k, "length": len(d) + 1} for k, d in blocks]})
    body = struct.pack("<I", len(doc)) + doc.encode() + b"".join(d for _, d in blocks)
    with _raw(gw) as sock:
        sock.sendall(_batch_head(len(body)) + body)
        status, answer = _answer(sock.makefile("rb"))
    assert status.startswith("HTTP/1.1 400") and b"MalformedFrames" in answer
    _nothing_stored(gw, [k for k, _ in blocks])
    assert _landed(gw) == 0


def test_a_batch_cut_short_stores_nothing(gw: Gateway) -> None:
    blocks = [(f"cut/{i}", os.urandom(1 * MiB)) for i in range(4)]
    body = _framed(blocks)
    with _raw(gw) as sock:
        sock.sendall(_batch_head(len(body)) + body[:len(body) // 2])
        sock.shutdown(socket.SHUT_WR)
        sock.recv(65536)  # the gateway closes the connection, with or without an answer
    assert _put(gw, [("after", os.urandom(2 * MiB))]) == 1
    assert _landed(gw, flush=True) == 1
    _nothing_stored(gw, [k for k, _ in blocks])


def test_a_request_pipelined_after_a_landed_batch(gw: Gateway) -> None:
    one = [(f"p1/{i}", os.urandom(700 * KiB + i)) for i in range(3)]
    two = [(f"p2/{i}", os.urandom(1 * MiB)) for i in range(2)]
    a, b = _framed(one), _framed(two)
    with _raw(gw) as sock:
        sock.sendall(_batch_head(len(a)) + a + _batch_head(len(b)) + b)
        reader = sock.makefile("rb")
        answers = [_answer(reader), _answer(reader)]
    assert [(status, json.loads(body)) for status, body in answers] == [
        ("HTTP/1.1 200 OK", {"stored": 3}), ("HTTP/1.1 200 OK", {"stored": 2})]
    assert _get(gw, [k for k, _ in one + two]) == [d for _, d in one + two]
    assert _landed(gw) == 5


def _off_loop(gw: Gateway) -> float:
    return metric(gw.endpoint, "s3kv_http_bytes_in_off_loop_total")


def test_batches_are_received_off_the_event_loop(gw: Gateway) -> None:
    """A landing batch's blocks are received by the compiled loop (wire/landrecv.py), their
    CRCs worked out as they come: they read back byte for byte, and the gateway counts the
    bytes; a client that stops part way for longer than the loop's budget has the rest of its
    body received by the event loop, and every block is stored whole all the same."""
    blocks = [(f"off/{i}", os.urandom(1 * MiB + 3 * i)) for i in range(6)]
    before = _off_loop(gw)
    assert _put(gw, blocks) == len(blocks)
    assert _off_loop(gw) - before >= 5 * MiB  # all but what came with the head, or nearly
    assert _get(gw, [k for k, _ in blocks]) == [d for _, d in blocks]

    slow = [(f"slow/{i}", os.urandom(1 * MiB)) for i in range(10)]
    body = _framed(slow)
    with _raw(gw) as sock:
        sock.sendall(_batch_head(len(body)) + body[:len(body) // 2])
        time.sleep(landrecv.BUDGET + 0.5)
        sock.sendall(body[len(body) // 2:])
        status, answer = _answer(sock.makefile("rb"))
    assert (status, json.loads(answer)) == ("HTTP/1.1 200 OK", {"stored": 10})
    assert _get(gw, [k for k, _ in slow]) == [d for _, d in slow]
    assert _landed(gw, flush=True) == len(blocks) + len(slow)
