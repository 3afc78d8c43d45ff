"""Backend faults under S3 load: a slow or flaky link, the server stopped, restarted empty,
hung (SIGSTOP), and segment objects corrupted on the backend.

Through every fault the gateway keeps answering (data, misses, or 503 SlowDown /
ServiceUnavailable with Retry-After), its memory stays bounded, no read ever returns bytes other
than those written, and it recovers by itself once the fault ends: PUTs (durable ones too) are
accepted again and /readyz turns 200 without a restart.

What the gateway does about blocks whose segments vanished with the backend's data (restarted
empty): they become misses: at the first read that finds the segment gone (NoSuchKey drops the
segment from the index), or at the next replica sync that lists segments (``--sync-interval``),
whichever comes first. Never other bytes: each block's checksum is verified on every read.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

import pytest

from tests.conftest import make_s3_client
from tests.reliability.conftest import Report
from tests.support.faultproxy import FaultProxy
from tests.support.gateway import SMALL, Gateway, backend_store, gateway_client
from tests.support.loadgen import (
    GatewayClients,
    Ledger,
    LoadSpec,
    RssSampler,
    flush,
    get_block,
    http_status,
    put_block,
    run_load,
    stats,
    timed_status,
    verify_all,
    wait_until,
)
from tests.support.s3server import MotoServer

#: the gateway's memory limits in these tests, and what its RSS must stay under
REQUEST_MEMORY = "64MiB"
RSS_BOUND_MIB = 400
FAULT_ARGS = [*SMALL, "--backend-timeout", "3", "--dram-cache", "0",
              "--max-request-memory", REQUEST_MEMORY]

#: the long runs (--long) take minutes; pytest's default timeout is 300 s
pytestmark = pytest.mark.timeout(1800)


def load_for(gw: Gateway, bucket: str, ledger: Ledger, rnd: random.Random, prefix: str,
             seconds: float, spec: LoadSpec) -> list[float]:
    """Run the S3 load for ``seconds``; meanwhile time /healthz every 0.5 s.

    Returns the probe's latencies (seconds)."""
    latencies: list[float] = []

    async def main() -> None:
        stop = asyncio.Event()
        load = asyncio.create_task(run_load(gw.endpoint, bucket, ledger, rnd, prefix, spec,
                                            stop))
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            status, took = await asyncio.to_thread(timed_status, gw.endpoint + "/healthz")
            latencies.append(took)
            assert status == 200, f"/healthz answered {status} during the fault"
            await asyncio.sleep(0.5)
        stop.set()
        await asyncio.wait_for(load, 120)

    asyncio.run(main())
    return latencies


def durable_put_ok(gw: Gateway, bucket: str, ledger: Ledger, key: str) -> bool:
    async def one() -> str:
        async with GatewayClients(gw.endpoint) as c:
            return await put_block(c, ledger, bucket, key, 300_000, durable=True)

    return asyncio.run(one()) == "ok"


def recovers(gw: Gateway, bucket: str, ledger: Ledger, timeout: float = 40.0) -> float:
    """Seconds until a durable PUT is accepted and /readyz is 200 again (fails the test if not)."""
    t0 = time.monotonic()
    n = [0]

    def ok() -> bool:
        n[0] += 1
        return durable_put_ok(gw, bucket, ledger, f"recovery/{uuid.uuid4().hex[:8]}-{n[0]}")

    assert wait_until(ok, timeout, interval=0.5), "durable PUTs were not accepted again"
    assert wait_until(lambda: http_status(gw.endpoint + "/readyz") == 200, 20), "not ready"
    return time.monotonic() - t0


def check(row_ok: bool, ledger: Ledger, rss: RssSampler, what: str) -> None:
    assert not ledger.wrong, (what, ledger.wrong[:5])
    assert not ledger.durable_lost, (what, ledger.durable_lost[:5])
    assert rss.peak_mib < RSS_BOUND_MIB, (what, rss.peak_mib)
    assert row_ok, what


# ---- a slow and flaky link -------------------------------------------------------------------

PROXY_PHASES: list[tuple[str, dict[str, float]]] = [
    ("latency 200 ms per request", {"latency": 0.2}),
    ("connections dropped mid-body (p=0.3)", {"p_drop": 0.3}),
    ("503 SlowDown answers (p=0.4)", {"p_503": 0.4}),
    ("500 InternalError answers (p=0.4)", {"p_500": 0.4}),
    ("all at once (latency 50 ms, p=0.15 each)",
     {"latency": 0.05, "p_drop": 0.15, "p_503": 0.15, "p_500": 0.15}),
]


def test_flaky_link(s3_server: MotoServer, reliability_report: Report, long_run: bool) -> None:
    seconds = 25.0 if long_run else 2.0
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    backend_bucket = f"flaky-{uuid.uuid4().hex[:10]}"
    backend_store(s3_server, backend_bucket)
    with FaultProxy(s3_server.host, s3_server.port, seed=seed) as proxy:
        gw = Gateway(f"s3://{backend_bucket}/kv?endpoint={proxy.endpoint}", FAULT_ARGS)
        try:
            gw.start()
            gateway_client(gw.endpoint).create_bucket(Bucket="flaky")
            with RssSampler(lambda: gw.pid) as rss:
                # the short run leaves out the combined phase (each fault also runs alone)
                phases = PROXY_PHASES if long_run else PROXY_PHASES[:-1]
                for i, (name, settings) in enumerate(phases):
                    ledger = Ledger()
                    before = proxy.faults
                    proxy.clear()
                    proxy.set(**settings)
                    spec = LoadSpec(tasks=4, durable_p=0.25, misses_allowed=True)
                    health = load_for(gw, "flaky", ledger, rnd, f"p{i}", seconds, spec)
                    injected = proxy.faults - before
                    proxy.clear()
                    took = recovers(gw, "flaky", ledger)
                    # after the fault: every durable block acknowledged reads back exactly
                    asyncio.run(verify_all(gw.endpoint, "flaky", ledger))
                    refused = ledger.counts["put_slowdown"] + ledger.counts["put_unavailable"]
                    row = reliability_report.record(
                        "backend-faults", f"flaky link: {name}", faults=injected,
                        requests=ledger.requests, wrong_bytes=len(ledger.wrong),
                        durable_lost=len(ledger.durable_lost), peak_rss_mib=rss.peak_mib,
                        held=not ledger.wrong and not ledger.durable_lost
                        and max(health) < 2.0 and rss.peak_mib < RSS_BOUND_MIB,
                        note=f"seed {seed}; PUTs ok {ledger.counts['put_ok']}, refused 503 "
                             f"{refused}; GETs ok {ledger.counts['get_ok']}, misses "
                             f"{ledger.counts['get_miss']}; /healthz max "
                             f"{max(health) * 1000:.0f} ms; recovered in {took:.1f} s")
                    assert injected > 0 or settings.keys() == {"latency"}, name
                    assert max(health) < 2.0, (name, health)
                    check(row.held, ledger, rss, name)
            st = stats(gw.endpoint)
            assert st["checksum_failures"] == 0, st  # faults are not corruption
        finally:
            gw.cleanup()


# ---- the server stopped, restarted empty, hung ------------------------------------------------

def _timed_get(gw: Gateway, bucket: str, ledger: Ledger, key: str) -> tuple[str, float]:
    async def one() -> tuple[str, float]:
        async with GatewayClients(gw.endpoint) as c:
            t0 = time.monotonic()
            result, data = await get_block(c.plain, ledger, bucket, key)
            if result == "ok":
                ledger.check_read(key, data, after_crash=True)
            return result, time.monotonic() - t0

    return asyncio.run(one())


def test_backend_stopped_emptied_hung(private_s3_server: MotoServer, reliability_report: Report,
                                      long_run: bool) -> None:
    server = private_s3_server
    seconds = 20.0 if long_run else 2.0
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    backend_bucket = f"out-{uuid.uuid4().hex[:8]}"
    store = backend_store(server, backend_bucket)
    gw = Gateway(store, [*FAULT_ARGS, "--sync-interval", "2"])
    spec = LoadSpec(tasks=4, durable_p=0.25, misses_allowed=True)
    try:
        gw.start()
        gateway_client(gw.endpoint).create_bucket(Bucket="outage")
        with RssSampler(lambda: gw.pid) as rss:
            # before: blocks on the backend (sealed) and in memory
            before = Ledger()
            load_for(gw, "outage", before, rnd, "before", 2.0, LoadSpec(tasks=3))
            flush(gw.endpoint)
            assert not before.wrong

            # 1. the server stopped (connection refused)
            stopped = Ledger()
            server.stop()
            health = load_for(gw, "outage", stopped, rnd, "stopped", seconds, spec)
            old = rnd.sample(sorted(before.blocks), min(2, len(before.blocks)))
            reads = [_timed_get(gw, "outage", before, k) for k in old]
            # sealed before the stop: the S3 front answers 503 (retry), not a miss (404)
            assert all(r in ("ok", "unavailable") for r, _ in reads), reads
            assert max(t for _, t in reads) < 15, reads
            refused = stopped.counts["put_slowdown"] + stopped.counts["put_unavailable"]
            assert refused > 0, stopped.counts
            assert http_status(gw.endpoint + "/readyz") == 503
            row = reliability_report.record(
                "backend-faults", "S3 server stopped (connection refused)", faults=1,
                requests=stopped.requests + len(reads), wrong_bytes=len(stopped.wrong)
                + len(before.wrong), durable_lost=0, peak_rss_mib=rss.peak_mib,
                held=not stopped.wrong and not before.wrong and rss.peak_mib < RSS_BOUND_MIB,
                note=f"PUTs refused 503 {refused}, ok {stopped.counts['put_ok']}; reads of "
                     f"sealed blocks answered in <= {max(t for _, t in reads):.1f} s; /healthz "
                     f"max {max(health) * 1000:.0f} ms")
            check(row.held, stopped, rss, "stopped")

            # 2. the server back, EMPTY: the bucket and every segment are gone
            emptied = Ledger()
            server.start()
            health = load_for(gw, "outage", emptied, rnd, "emptied", seconds, spec)
            assert not any(k.startswith("emptied") for k, b in emptied.blocks.items()
                           if b.acked and b.durable), "a durable PUT succeeded with no bucket"
            # ... and the bucket recreated (the operator's job): the gateway recovers by itself
            make_s3_client(server.endpoint).create_bucket(Bucket=backend_bucket)
            after = Ledger()
            took = recovers(gw, "outage", after)
            load_for(gw, "outage", after, rnd, "after", 2.0, LoadSpec(tasks=3))
            flush(gw.endpoint)
            # old blocks are misses (their segments vanished), never other bytes
            misses = asyncio.run(verify_all(gw.endpoint, "outage", before))
            asyncio.run(verify_all(gw.endpoint, "outage", emptied))
            missing_after = [k for k in asyncio.run(verify_all(gw.endpoint, "outage", after))
                             if after.blocks[k].acked]
            # and the index forgets them: the listing sync drops vanished segments
            assert wait_until(lambda: stats(gw.endpoint)["index_entries"] <= len(
                [b for b in [*emptied.blocks.values(), *after.blocks.values()] if b.acked]), 15)
            durable_lost = len(after.durable_lost)
            row = reliability_report.record(
                "backend-faults", "S3 server restarted empty (bucket gone), bucket recreated",
                faults=1, requests=emptied.requests + after.requests + before.requests,
                wrong_bytes=len(emptied.wrong) + len(after.wrong) + len(before.wrong),
                durable_lost=durable_lost, peak_rss_mib=rss.peak_mib,
                held=not (emptied.wrong or after.wrong or before.wrong or durable_lost
                          or missing_after) and rss.peak_mib < RSS_BOUND_MIB,
                note=f"{len(misses)}/{len(before.blocks)} blocks of the wiped segments read "
                     f"as misses; PUTs refused 503 while the bucket was gone "
                     f"{emptied.counts['put_slowdown'] + emptied.counts['put_unavailable']}; "
                     f"recovered in {took:.1f} s; /healthz max {max(health) * 1000:.0f} ms")
            assert len(misses) == len(before.blocks), (len(misses), len(before.blocks))
            assert not missing_after, missing_after[:5]
            check(row.held, emptied, rss, "emptied")

            # 3. the server hung: SIGSTOP (accepts connections, never answers)
            hung = Ledger()
            server.pause()
            try:
                health = load_for(gw, "outage", hung, rnd, "hung", seconds + 2, spec)
                sealed = [k for k, b in after.blocks.items() if b.acked][:2]
                reads = [_timed_get(gw, "outage", after, k) for k in sealed]
                rss_hung = rss.peak_mib
            finally:
                server.resume()
            assert all(r in ("ok", "miss", "unavailable") for r, _ in reads), reads
            slowest = max(t for _, t in reads)
            assert slowest < 15, reads
            took = recovers(gw, "outage", hung)
            asyncio.run(verify_all(gw.endpoint, "outage", hung))
            asyncio.run(verify_all(gw.endpoint, "outage", after))
            row = reliability_report.record(
                "backend-faults", "S3 server hung (SIGSTOP), then resumed", faults=1,
                requests=hung.requests + len(reads), wrong_bytes=len(hung.wrong)
                + len(after.wrong), durable_lost=len(hung.durable_lost)
                + len(after.durable_lost), peak_rss_mib=rss.peak_mib,
                held=not (hung.wrong or after.wrong or hung.durable_lost or after.durable_lost)
                and rss_hung < RSS_BOUND_MIB,
                note=f"PUTs refused 503 "
                     f"{hung.counts['put_slowdown'] + hung.counts['put_unavailable']}, ok "
                     f"{hung.counts['put_ok']}; reads of sealed blocks answered in <= "
                     f"{slowest:.1f} s; /healthz max {max(health) * 1000:.0f} ms; recovered "
                     f"in {took:.1f} s")
            check(row.held, hung, rss, "hung")
            check(True, after, rss, "hung (blocks written before)")
    finally:
        gw.cleanup()


# ---- corruption ------------------------------------------------------------------------------

def _flip(client: Any, bucket: str, key: str, rnd: random.Random, n: int,
          lo: int = 0, hi: int | None = None) -> int:
    """Flip one bit in each of ``n`` random bytes of the object (between lo and hi).

    Returns 0 for an object the gateway deleted since it was listed (a segment with nothing
    live left, e.g. after its corrupt blocks were dropped, is evicted with its sidecar)."""
    try:
        data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    except client.exceptions.NoSuchKey:
        return 0
    hi = len(data) if hi is None else min(hi, len(data))
    for _ in range(n):
        pos = rnd.randrange(lo, hi)
        data[pos] ^= 1 << rnd.randrange(8)
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    return n


def test_corrupted_segments(s3_server: MotoServer, reliability_report: Report,
                            long_run: bool) -> None:
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    backend_bucket = f"rot-{uuid.uuid4().hex[:10]}"
    store = backend_store(s3_server, backend_bucket)
    backend = make_s3_client(s3_server.endpoint)
    gw = Gateway(store, FAULT_ARGS)
    ledger = Ledger()
    flips = 0
    try:
        gw.start()
        gateway_client(gw.endpoint).create_bucket(Bucket="rot")
        with RssSampler(lambda: gw.pid) as rss:
            load_for(gw, "rot", ledger, rnd, "w", 8.0 if long_run else 2.0,
                     LoadSpec(tasks=3, durable_p=0.0))
            flush(gw.endpoint)
            objs = backend.list_objects_v2(Bucket=backend_bucket, Prefix="kv/segments/")
            segments = [o["Key"] for o in objs.get("Contents", [])]
            assert segments
            # 1. bit flips inside segments (blocks, padding, footers): reads are exact or miss
            per_segment = 12 if long_run else 4
            for key in segments:
                flips += _flip(backend, backend_bucket, key, rnd, per_segment)
            # (only acknowledged blocks: a PUT refused during the load is a miss of its own)
            misses = [k for k in asyncio.run(verify_all(gw.endpoint, "rot", ledger))
                      if ledger.blocks[k].acked]
            st = stats(gw.endpoint)
            assert misses and st["checksum_failures"] >= len(misses), (len(misses), st)
            # 2. restart: the index comes from the (intact) sidecars; still exact or miss
            gw.terminate()
            gw.start()
            asyncio.run(verify_all(gw.endpoint, "rot", ledger))
            # 3. corrupt sidecars too: recovery falls back to the footers (or skips segments)
            sidecars = backend.list_objects_v2(Bucket=backend_bucket, Prefix="kv/manifests/")
            for obj in sidecars.get("Contents", []):
                flips += _flip(backend, backend_bucket, obj["Key"], rnd, 2)
            gw.terminate()
            gw.start()
            misses_after = asyncio.run(verify_all(gw.endpoint, "rot", ledger))
            assert http_status(gw.endpoint + "/readyz") == 200
            # the gateway still takes writes and reads them back
            fresh = Ledger()
            load_for(gw, "rot", fresh, rnd, "fresh", 2.0, LoadSpec(tasks=2))
            flush(gw.endpoint)
            asyncio.run(verify_all(gw.endpoint, "rot", fresh))
    finally:
        gw.cleanup()
    row = reliability_report.record(
        "backend-faults", "bit flips in segment objects and sidecar manifests", faults=flips,
        requests=ledger.requests + fresh.requests, wrong_bytes=len(ledger.wrong)
        + len(fresh.wrong), durable_lost=len(fresh.durable_lost), peak_rss_mib=rss.peak_mib,
        held=not ledger.wrong and not fresh.wrong and not fresh.durable_lost,
        note=f"seed {seed}; {len(ledger.blocks)} blocks in {len(segments)} segments; "
             f"misses after segment flips {len(misses)}, after sidecar flips too "
             f"{len(misses_after)}; checksum failures counted {st['checksum_failures']}")
    check(row.held, ledger, rss, "corruption")
    assert rss.peak_mib < RSS_BOUND_MIB
