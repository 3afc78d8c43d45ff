"""Large PUT bodies received straight into their segment (store/landing.py, takeover.py's
BodyLanding): on the file backend the transport reads the body into a window of the segment's
file, so what the client sent must come back byte for byte from the open segment, from the
sealed one, and after a restart; a body refused or cut short must store nothing and must not
keep its segment from sealing; a request pipelined after a landed body is parsed as before.

Real parts: a gateway process on a file:// store, boto3 and a raw socket as clients."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from s3kv.sizes import MiB
from s3kv.wire import landrecv
from tests.support.gateway import Gateway, gateway_client, metric, running_gateway, store_stats

ARGS = ["--segment-size", "64MiB", "--part-size", "8MiB", "--max-block-size", "32MiB",
        "--sync-interval", "0", "--dram-cache", "0"]


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    with running_gateway(f"file://{tmp_path}/store", ARGS, credentials=False) as g:
        yield g


def _client(gw: Gateway) -> Any:
    s3 = gateway_client(gw.endpoint)
    s3.create_bucket(Bucket="landing")
    return s3


def _landed(gw: Gateway, *, flush: bool = False) -> int:
    return int(store_stats(gw.endpoint, flush=flush)["blocks_landed"])


def test_landed_blocks_read_back_open_sealed_and_after_restart(gw: Gateway) -> None:
    s3 = _client(gw)
    # across part boundaries (8 MiB), unaligned lengths, and one too small to land
    blobs = {f"k{n}": os.urandom(n) for n in (1 * MiB, 3 * MiB + 17, 12 * MiB + 4095, 300_000)}
    for key, data in blobs.items():
        s3.put_object(Bucket="landing", Key=key, Body=data)
    for key, data in blobs.items():  # from the open segment
        assert s3.get_object(Bucket="landing", Key=key)["Body"].read() == data
    assert _landed(gw, flush=True) == 3
    for key, data in blobs.items():  # from the sealed segment's file
        assert s3.get_object(Bucket="landing", Key=key)["Body"].read() == data
    gw.stop()
    gw.start()
    s3 = gateway_client(gw.endpoint)
    for key, data in blobs.items():  # the index rebuilt from the manifest
        assert s3.get_object(Bucket="landing", Key=key)["Body"].read() == data


def test_refused_body_stores_nothing_and_the_segment_still_seals(gw: Gateway) -> None:
    s3 = _client(gw)
    data = os.urandom(4 * MiB)
    wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket="landing", Key="bad", Body=data, ContentMD5=wrong)
    assert err.value.response["Error"]["Code"] == "BadDigest"
    good = os.urandom(2 * MiB)
    s3.put_object(Bucket="landing", Key="good", Body=good)
    assert _landed(gw, flush=True) == 1  # returns: the given-up landing did not hold the seal
    with pytest.raises(ClientError) as err:
        s3.head_object(Bucket="landing", Key="bad")
    assert err.value.response["Error"]["Code"] in ("404", "NoSuchKey")
    assert s3.get_object(Bucket="landing", Key="good")["Body"].read() == good


def _raw(gw: Gateway) -> socket.socket:
    host, port = gw.endpoint.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _head(key: str, length: int, extra: str = "") -> bytes:
    return (f"PUT /landing/{key} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
            f"x-amz-content-sha256: UNSIGNED-PAYLOAD\r\n{extra}\r\n").encode()


def _responses(sock: socket.socket, count: int) -> list[bytes]:
    got = b""
    while got.count(b"HTTP/1.1 ") < count or not got.endswith(b"\r\n\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return [b"HTTP/1.1 " + r for r in got.split(b"HTTP/1.1 ")[1:]]


def test_a_body_cut_short_stores_nothing(gw: Gateway) -> None:
    s3 = _client(gw)
    with _raw(gw) as sock:
        sock.sendall(_head("cut", 4 * MiB) + os.urandom(2 * MiB))
        sock.shutdown(socket.SHUT_WR)
        sock.recv(65536)  # the gateway closes the connection, with or without an answer
    good = os.urandom(2 * MiB)
    s3.put_object(Bucket="landing", Key="after", Body=good)
    assert _landed(gw, flush=True) == 1
    with pytest.raises(ClientError):
        s3.head_object(Bucket="landing", Key="cut")
    assert s3.get_object(Bucket="landing", Key="after")["Body"].read() == good


def test_a_request_pipelined_after_a_landed_body(gw: Gateway) -> None:
    s3 = _client(gw)
    first, second = os.urandom(3 * MiB), os.urandom(2 * MiB + 1)
    with _raw(gw) as sock:
        sock.sendall(_head("p1", len(first)) + first + _head("p2", len(second)) + second)
        answers = _responses(sock, 2)
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 2
    assert s3.get_object(Bucket="landing", Key="p1")["Body"].read() == first
    assert s3.get_object(Bucket="landing", Key="p2")["Body"].read() == second
    assert _landed(gw) == 2


def _off_loop(gw: Gateway) -> float:
    return metric(gw.endpoint, "s3kv_http_bytes_in_off_loop_total")


def test_large_bodies_are_received_off_the_event_loop(gw: Gateway) -> None:
    """A body with landrecv.LEAST or more to come is received by the compiled loop, its CRC
    worked out as it comes (a wrong one would make the sealed block a checksum failure, a
    miss): it reads back whole, a request pipelined after it is parsed, a client that stops
    for longer than the loop's budget has the rest received by the event loop, one gone inside
    or with a wrong Content-MD5 stores nothing, and a client's own crc32 checksum is worked
    out as the body comes too, and checked."""
    s3 = _client(gw)
    big = {"off/a": os.urandom(8 * MiB + 1), "off/b": os.urandom(12 * MiB)}
    before = _off_loop(gw)
    with _raw(gw) as sock:
        sock.sendall(b"".join(_head(k, len(d)) + d for k, d in big.items()))
        assert [a.split(b"\r\n", 1)[0] for a in _responses(sock, 2)] == [b"HTTP/1.1 200 OK"] * 2
    assert _off_loop(gw) - before >= 18 * MiB
    slow = big["off/slow"] = os.urandom(10 * MiB)
    with _raw(gw) as sock:
        sock.sendall(_head("off/slow", len(slow)) + slow[:5 * MiB])
        time.sleep(landrecv.BUDGET + 0.5)
        sock.sendall(slow[5 * MiB:])
        assert _responses(sock, 1)[0].startswith(b"HTTP/1.1 200 OK")
    with _raw(gw) as sock:
        sock.sendall(_head("off/cut", 10 * MiB) + os.urandom(6 * MiB))
        sock.shutdown(socket.SHUT_WR)
        sock.recv(65536)
    wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket="landing", Key="off/md5", Body=os.urandom(8 * MiB), ContentMD5=wrong)
    assert err.value.response["Error"]["Code"] == "BadDigest"
    sent = big["off/crc"] = os.urandom(9 * MiB)
    before = _off_loop(gw)
    s3.put_object(Bucket="landing", Key="off/crc", Body=sent, ChecksumAlgorithm="CRC32")
    assert _off_loop(gw) - before >= 8 * MiB  # the client's crc32 worked out as it came
    wrong_crc = base64.b64encode(zlib.crc32(b"something else").to_bytes(4, "big")).decode()
    with _raw(gw) as sock:
        sock.sendall(_head("off/badcrc", 8 * MiB, f"x-amz-checksum-crc32: {wrong_crc}\r\n")
                     + os.urandom(8 * MiB))
        answer = b""
        while b"</Error>" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400") and b"BadDigest" in answer
    assert _landed(gw, flush=True) == 4
    for key, data in big.items():  # from the sealed segment's file, checked against its CRC
        assert s3.get_object(Bucket="landing", Key=key)["Body"].read() == data, key
    for key in ("off/cut", "off/md5", "off/badcrc"):
        with pytest.raises(ClientError):
            s3.head_object(Bucket="landing", Key=key)
    assert store_stats(gw.endpoint)["checksum_failures"] == 0
