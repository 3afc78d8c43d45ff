"""A native batch get of sealed blocks on a file:// store: the blocks the backend lends as views
of its mapped segments are checked and sent in runs by the compiled loop of
s3kv/wire/blocksend.py, and a block whose bytes are no longer what was stored is a miss,
counted, logged and forgotten, while the blocks around it arrive whole.

Real parts: a gateway process on a file:// store, the native client."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from s3kv.client import S3KVClient
from s3kv.client_stream import END, RecordLanding
from s3kv.sizes import KiB, MiB
from s3kv.wire import blocksend
from tests.support.gateway import Gateway, metric, running_gateway, store_stats

ARGS = ["--segment-size", "64MiB", "--part-size", "8MiB", "--sync-interval", "0",
        "--dram-cache", "0"]
NS = "checked"


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    with running_gateway(f"file://{tmp_path}/store", ARGS, credentials=False) as g:
        yield g


def _put_and_get(gw: Gateway, blocks: list[tuple[str, bytes]], keys: list[str]
                 ) -> list[bytes | None]:
    async def run() -> list[bytes | None]:
        async with S3KVClient(gw.endpoint, timeout=120) as kv:
            if blocks:
                await kv.create_namespace(NS)
                assert await kv.put_many(NS, blocks) == len(blocks)
                await kv.flush()  # sealed: read back from the backend's mapped files
            return [data async for _, data in kv.iter_many(NS, keys)]
    return asyncio.run(run())


def _flip(root: Path, needle: bytes) -> None:
    """Flip a byte of ``needle`` where the store's files hold it (its one segment)."""
    found = 0
    for path in root.rglob("*"):
        if not path.is_file() or ".recycled" in path.parts:
            continue
        data = path.read_bytes()
        at = data.find(needle)
        if at >= 0:
            with path.open("r+b") as f:
                f.seek(at + 1000)
                f.write(bytes([data[at + 1000] ^ 0xFF]))
            found += 1
    assert found == 1


@pytest.mark.skipif(blocksend.sender() is None, reason="the compiled send did not build")
def test_lent_blocks_are_checked_as_they_are_sent_and_a_corrupt_one_is_a_miss(
        gw: Gateway, tmp_path: Path) -> None:
    blocks = [(f"b/{i}", os.urandom(256 * KiB + 17 * i)) for i in range(40)]
    keys = [k for k, _ in blocks]
    before = metric(gw.endpoint, "s3kv_http_bytes_out_compiled_total")
    assert _put_and_get(gw, blocks, [*keys, "absent", keys[0]]) == \
        [d for _, d in blocks] + [None, blocks[0][1]]
    sent = metric(gw.endpoint, "s3kv_http_bytes_out_compiled_total") - before
    assert 0 < sent <= sum(len(d) for _, d in blocks) + len(blocks[0][1])  # the compiled loop's

    stats = store_stats(gw.endpoint)
    _flip(tmp_path / "store", blocks[7][1][:4096])
    got = _put_and_get(gw, [], keys)
    assert got[7] is None  # not a byte of it: a miss
    assert got[:7] + got[8:] == [d for _, d in blocks[:7] + blocks[8:]]
    after = store_stats(gw.endpoint)
    assert after["checksum_failures"] == stats["checksum_failures"] + 1
    assert (after["hits"] - stats["hits"], after["misses"] - stats["misses"]) == (39, 1)
    assert _put_and_get(gw, [], [keys[7], keys[8]]) == [None, blocks[8][1]]  # forgotten
    assert store_stats(gw.endpoint)["checksum_failures"] == after["checksum_failures"]


def test_a_batch_get_larger_than_a_send_run_reads_back_whole(gw: Gateway) -> None:
    """More blocks than one run of the compiled loop takes, of sizes that are not a page's,
    some of them large: every one arrives, in order (with or without the extension)."""
    blocks = [(f"r/{i}", os.urandom((3 * MiB if i % 50 == 0 else 4 * KiB) + i))
              for i in range(150)]
    keys = [k for k, _ in blocks]
    assert _put_and_get(gw, blocks, keys[::-1]) == [d for _, d in blocks][::-1]


def _decode(stream: bytes, keys: list[str]) -> list[bytes | None]:
    """The blocks of a whole batch-get stream, as the native client's parser reads them."""
    async def run() -> list[bytes | None]:
        landing = RecordLanding(keys)
        landing(memoryview(stream))
        landing.finish()
        out: list[bytes | None] = []
        while (record := await landing.next()) is not END:
            out.append(None if record is None else await record.readexactly(record.length))
        return out
    return asyncio.run(run())


@pytest.mark.skipif(blocksend.sender() is None, reason="the compiled send did not build")
def test_a_reader_that_waits_has_the_rest_queued_and_gets_every_block_whole(
        gw: Gateway) -> None:
    """A client that reads nothing for a while: the compiled loop fills the socket and stops
    part way through a block, the transport queues that block's rest, the blocks after it go
    out as the socket drains, and the stream is whole and in order."""
    blocks = [(f"w/{i}", os.urandom(512 * KiB + i)) for i in range(48)]  # 24 MiB
    keys = [k for k, _ in blocks]
    assert _put_and_get(gw, blocks, keys[:1]) == [blocks[0][1]]
    before = metric(gw.endpoint, "s3kv_http_bytes_out_compiled_total")
    where = urlsplit(gw.endpoint)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=60)
    conn.request("POST", f"/v1/{NS}/batch-get", json.dumps({"keys": keys}),
                 {"Content-Type": "application/json"})
    time.sleep(1.0)  # the socket fills long before 24 MiB
    answer = conn.getresponse()
    assert answer.status == 200
    assert _decode(answer.read(), keys) == [d for _, d in blocks]
    conn.close()
    compiled = metric(gw.endpoint, "s3kv_http_bytes_out_compiled_total") - before
    assert 0 < compiled < sum(len(d) for _, d in blocks)  # some went through the transport
