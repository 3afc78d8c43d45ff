"""A home gateway for every key: rendezvous routing in the native client, and the visibility
rule across replicas (docs/operations.md, "Several gateways"), with two real gateway processes
on one backend bucket of a real S3 server (moto)."""

from __future__ import annotations

import asyncio
import collections
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from s3kv.client import S3KVClient
from s3kv.routing import GatewaySet, resolve_all
from tests.gateway.conftest import TOKEN, Gateway, backend_store
from tests.support.gateway import gateway_client, running_gateways
from tests.support.s3server import MotoServer, free_port

SEAL_AFTER = 2.0
SYNC = 1.0
ARGS = ["--segment-size", "10MiB", "--part-size", "5MiB", "--max-block-size", "5MiB",
        "--seal-after", str(SEAL_AFTER), "--sync-interval", str(SYNC)]


# ---- rendezvous hashing (pure) ---------------------------------------------------------------
URLS = [f"http://10.0.0.{i}:9470" for i in range(1, 5)]  # names only: nothing is contacted


def test_homes_spread_and_move_only_with_their_gateway() -> None:
    keys = [f"chain/{i:05d}" for i in range(4000)]
    four = GatewaySet(URLS)
    homes = {k: four.home(k) for k in keys}
    counts = collections.Counter(homes.values())
    assert set(counts) == set(URLS)
    assert all(600 < c < 1400 for c in counts.values()), counts  # ~1000 each
    assert homes == {k: GatewaySet(list(reversed(URLS))).home(k) for k in keys}  # no order
    three = GatewaySet(URLS[:3])
    moved = [k for k in keys if three.home(k) != homes[k]]
    assert moved and all(homes[k] == URLS[3] for k in moved)  # only the removed one's keys


def test_a_down_gateway_sends_its_keys_to_the_next_choice() -> None:
    gs = GatewaySet(URLS, down_for=0.2)
    key = "k/1"
    first, second = gs.choices(key)[:2]
    gs.mark_down(first)
    assert gs.home(key) == second
    assert gs.choices(key)[-1] == first  # still tried last
    deadline = time.monotonic() + 5
    while not gs.is_up(first):  # for a bounded time only
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert gs.home(key) == first
    groups = gs.split([f"k/{i}" for i in range(100)])
    assert sorted(i for w in groups.values() for i in w) == list(range(100))


async def test_a_dns_name_is_resolved_and_re_resolved() -> None:
    """The resolver is the seam for a headless Service's DNS, which cannot exist here; the real
    resolver is checked on localhost."""
    answers = [["127.0.0.1", "127.0.0.2"], ["127.0.0.2", "127.0.0.3"]]
    calls: list[tuple[str, int]] = []

    async def resolver(host: str, port: int) -> list[str]:
        calls.append((host, port))
        return answers[min(len(calls), len(answers)) - 1]

    gs = GatewaySet("http://rel-s3kv-headless.kv.svc:9470", resolve_every=0.1,
                    resolver=resolver)
    await gs.refresh()
    assert gs.gateways == ["http://127.0.0.1:9470", "http://127.0.0.2:9470"]
    await gs.refresh()  # not due yet
    assert len(calls) == 1
    await asyncio.sleep(0.15)
    await gs.refresh()
    assert gs.gateways == ["http://127.0.0.2:9470", "http://127.0.0.3:9470"]
    assert calls[0] == ("rel-s3kv-headless.kv.svc", 9470)
    assert "127.0.0.1" in await resolve_all("localhost", 9470)
    literal = GatewaySet("http://127.0.0.1:1,http://127.0.0.1:2", resolver=resolver)
    await literal.refresh(force=True)  # URLs given: nothing to resolve
    assert literal.gateways == ["http://127.0.0.1:1", "http://127.0.0.1:2"] and len(calls) == 2


# ---- two gateways on one bucket ------------------------------------------------------------
@pytest.fixture
def pair(s3_server: MotoServer) -> Iterator[list[Gateway]]:
    with running_gateways(backend_store(s3_server), [ARGS, ARGS], log_level="info") as gws:
        yield gws


async def test_own_writes_at_once_others_after_seal_and_sync(pair: list[Gateway]) -> None:
    a, b = pair
    keys = [f"h/{uuid.uuid4().hex}" for _ in range(40)]
    blocks = {k: os.urandom(3000) for k in keys}
    async with S3KVClient([a.endpoint, b.endpoint], token=TOKEN) as kv:
        await kv.create_namespace("homes")  # on both gateways
        homes = {k: kv.gateways.home(k) for k in keys}
        assert set(homes.values()) == {a.endpoint, b.endpoint}
        await kv.put_many("homes", blocks)
        written = time.monotonic()
        # through the home gateway: at once (from the open segment's memory)
        assert await kv.lookup("homes", keys) == (len(keys), [True] * len(keys))
        assert await kv.get_many("homes", keys) == [blocks[k] for k in keys]
    on_a = [k for k in keys if homes[k] == a.endpoint]
    async with S3KVClient(b.endpoint, token=TOKEN) as only_b:
        # the other replica: not before A seals the segment (seal_after) ...
        _, seen = await only_b.lookup("homes", on_a)
        if time.monotonic() - written < SEAL_AFTER:
            assert not any(seen)
        # ... and then within seal_after plus a replica sync (plus the upload)
        while not all((await only_b.lookup("homes", on_a))[1]):
            assert time.monotonic() - written < SEAL_AFTER + SYNC + 10, "B never saw A's writes"
            await asyncio.sleep(0.1)
        assert await only_b.get_many("homes", on_a) == [blocks[k] for k in on_a]


def _bucket_on_both(pair: list[Gateway], bucket: str) -> tuple[Any, Any]:
    """S3 clients of A and B, once B knows the bucket created through A."""
    a, b = (gateway_client(g.endpoint) for g in pair)
    a.create_bucket(Bucket=bucket)
    deadline = time.monotonic() + SYNC + 10
    while bucket not in [x["Name"] for x in b.list_buckets()["Buckets"]]:
        assert time.monotonic() < deadline, "B never learnt the bucket"
        time.sleep(0.1)
    return a, b


def test_deletes_and_overwrites_reach_the_other_replica_after_seal_and_sync(
        pair: list[Gateway]) -> None:
    """A delete or an overwrite through B is B's at once and travels to A as A's writes travel
    to B (a tombstone or a block in B's open segment): within seal plus sync the last writer
    wins on both (docs/operations.md once said deletes reached the others at once; until then
    A serves what it held or, where B found a whole segment dead, misses it)."""
    a, b = _bucket_on_both(pair, "travel")
    for key in ("gone", "new", "kept"):  # "kept" keeps their segment alive
        a.put_object(Bucket="travel", Key=key, Body=b"v1")
    deadline = time.monotonic() + SEAL_AFTER + SYNC + 10
    while True:  # B sees A's writes after seal plus sync
        try:
            b.head_object(Bucket="travel", Key="gone")
            b.head_object(Bucket="travel", Key="new")
            break
        except ClientError:
            assert time.monotonic() < deadline, "B never saw A's writes"
            time.sleep(0.1)
    b.delete_object(Bucket="travel", Key="gone")
    b.put_object(Bucket="travel", Key="new", Body=b"v2")
    done = time.monotonic()
    with pytest.raises(ClientError):  # B's own at once
        b.head_object(Bucket="travel", Key="gone")
    assert b.get_object(Bucket="travel", Key="new")["Body"].read() == b"v2"
    # A, its segment alive (it holds "kept"): what it held, until B seals and A syncs
    assert a.get_object(Bucket="travel", Key="gone")["Body"].read() == b"v1"
    assert a.get_object(Bucket="travel", Key="new")["Body"].read() == b"v1"
    while True:
        try:
            a.head_object(Bucket="travel", Key="gone")
        except ClientError as err:
            assert err.response["Error"]["Code"] == "404"
            if a.get_object(Bucket="travel", Key="new")["Body"].read() == b"v2":
                break
        assert time.monotonic() - done < SEAL_AFTER + SYNC + 10, "A never saw B's changes"
        time.sleep(0.1)
    assert a.get_object(Bucket="travel", Key="kept")["Body"].read() == b"v1"


def test_a_bucket_deleted_through_one_gateway_is_gone_through_the_other(pair: list[Gateway]
                                                                      ) -> None:
    """S3 clients on both replicas: B answers NoSuchBucket within a sync of A's DeleteBucket,
    for reads and writes, and lists it no more (before, B served it until it restarted)."""
    a, b = _bucket_on_both(pair, "gone-soon")
    b.put_object(Bucket="gone-soon", Key="k", Body=b"v")
    b.delete_object(Bucket="gone-soon", Key="k")
    a.delete_bucket(Bucket="gone-soon")
    deadline = time.monotonic() + SYNC + 10
    while "gone-soon" in [x["Name"] for x in b.list_buckets()["Buckets"]]:
        assert time.monotonic() < deadline, "B still serves the deleted bucket"
        time.sleep(0.1)
    for call in (lambda: b.put_object(Bucket="gone-soon", Key="k2", Body=b"v"),
                 lambda: b.get_object(Bucket="gone-soon", Key="k"),
                 lambda: b.list_objects_v2(Bucket="gone-soon")):
        with pytest.raises(ClientError) as err:
            call()
        assert err.value.response["Error"]["Code"] == "NoSuchBucket"


async def test_a_dead_gateway_is_misses_and_its_writes_go_to_the_next(pair: list[Gateway]
                                                                       ) -> None:
    a, b = pair
    keys = [f"d/{i}" for i in range(30)]
    async with S3KVClient([a.endpoint, b.endpoint], token=TOKEN, down_for=30) as kv:
        await kv.create_namespace("down")
        await kv.put_many("down", {k: b"v" + k.encode() for k in keys})
        a.kill()
        start = time.monotonic()
        _, present = await kv.lookup("down", keys)  # no error: A's keys are misses
        assert time.monotonic() - start < 5
        on_b = [kv.gateways.home(k) == b.endpoint for k in keys]  # A is down: all on B now
        assert all(on_b)
        assert any(present) and not all(present)
        got = await kv.get_many("down", keys)
        assert all(g is not None for g, p in zip(got, present, strict=True) if p)
    # a client that does not know yet: A's part of the put fails over to B within the call
    async with S3KVClient([a.endpoint, b.endpoint], token=TOKEN) as fresh:
        stored = await fresh.put_each("down", [(k, b"again") for k in keys])
        assert all(stored)
        assert not fresh.gateways.is_up(a.endpoint)
        assert await fresh.lookup_prefix("down", keys) == len(keys)
        assert await fresh.get_many("down", keys[:3]) == [b"again"] * 3


async def test_no_gateway_at_all_is_an_error_for_the_client() -> None:
    async with S3KVClient([f"http://127.0.0.1:{free_port()}"], token=TOKEN) as kv:
        from s3kv.errors import BackendUnavailable
        with pytest.raises(BackendUnavailable):
            await kv.lookup("x", ["a"])


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://[::1:1", "http://h:0",
                                 "gw:9470", "http://"])
def test_a_gateway_url_that_names_no_port_or_host_is_a_config_error(url: str) -> None:
    """A port out of range was an unreachable gateway at the first request; a broken IPv6
    literal a raw ValueError."""
    from s3kv.errors import ConfigError
    with pytest.raises(ConfigError, match="is not http\\(s\\)://HOST:PORT"):
        S3KVClient(url)


def test_batches_are_cut_into_requests_the_gateway_takes() -> None:
    from s3kv.client_io import request_parts

    sizes = [30, 30, 30, 100, 5, 5]
    assert request_parts(range(6), sizes.__getitem__, 64) == [[0, 1], [2], [3], [4, 5]]
    assert request_parts(range(10), lambda _i: 1, 1000, max_keys=4) == [[0, 1, 2, 3],
                                                                         [4, 5, 6, 7], [8, 9]]


async def test_a_key_no_utf8_holds_is_invalid_input_with_several_gateways(gateway: Gateway,
                                                                           gw_bucket: str
                                                                           ) -> None:
    """A key with a lone surrogate raised UnicodeEncodeError out of the routing (with one
    gateway it was already the gateway's InvalidInput): now it goes to its home gateway, which
    refuses it. Two names of one gateway, so whichever is the home answers."""
    from s3kv.errors import InvalidInput

    urls = [gateway.endpoint, gateway.endpoint.replace("127.0.0.1", "localhost")]
    async with S3KVClient(urls, token=TOKEN, direct_reads=False) as kv:
        ns = gw_bucket
        for call in (kv.lookup(ns, ["a\ud800"]), kv.get_many(ns, ["a\ud800"]),
                     kv.put_many(ns, {"a\ud800": b"v"}), kv.delete_many(ns, ["a\ud800"])):
            with pytest.raises(InvalidInput):
                await call
