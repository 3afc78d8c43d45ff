"""Many concurrent S3 clients against one gateway for a fixed duration.

Each client task has its own aiobotocore S3 clients (own connection pools); it PUTs fresh blocks
of random sizes (some durable) and reads random acknowledged blocks back, verifying every byte.
Held when: zero errors (a 503 SlowDown is retried after a pause, as S3 clients do, and counted,
not an error), zero wrong bytes, every acknowledged block read back, and flat memory: the
gateway's RSS in the last third of the run is not above its maximum in the first half (after
warm-up) by more than what the settings let the write path hold (``max_open_segments`` segments
of ``segment_size``) plus 32 MiB of allocator noise.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid

import pytest

from tests.reliability.conftest import Report
from tests.support.gateway import SMALL, Gateway, backend_store, gateway_client
from tests.support.loadgen import (
    Ledger,
    LoadSpec,
    RssSampler,
    flush,
    run_load,
    stats,
    verify_all,
)
from tests.support.s3server import MotoServer

SEGMENT_MIB = 10  # SMALL's --segment-size
MAX_OPEN_SEGMENTS = 2  # the default
SLACK_MIB = MAX_OPEN_SEGMENTS * SEGMENT_MIB + 32

#: the long runs (--long) take minutes; pytest's default timeout is 300 s
pytestmark = pytest.mark.timeout(1800)


def test_many_clients_fixed_duration(s3_server: MotoServer, reliability_report: Report,
                                     long_run: bool) -> None:
    seconds = 240.0 if long_run else 12.0
    tasks = 32 if long_run else 12
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    store = backend_store(s3_server, f"load-{uuid.uuid4().hex[:10]}")
    gw = Gateway(store, [*SMALL, "--dram-cache", "32MiB", "--max-request-memory", "64MiB",
                         "--log-level", "info"])
    ledger = Ledger()
    moto_peak = 0
    try:
        gw.start()
        gateway_client(gw.endpoint).create_bucket(Bucket="load")
        spec = LoadSpec(tasks=tasks, durable_p=0.1, max_size=1024 * 1024, retry_refused=True)

        async def main() -> int:
            stop = asyncio.Event()
            load = asyncio.create_task(run_load(gw.endpoint, "load", ledger, rnd, "l", spec,
                                                stop))
            t0 = time.monotonic()
            peak = 0
            while time.monotonic() - t0 < seconds:
                await asyncio.sleep(1.0)
                peak = max(peak, s3_server.rss_bytes())
            stop.set()
            await asyncio.wait_for(load, 120)
            return peak

        with RssSampler(lambda: gw.pid, period=0.5) as rss:
            moto_peak = asyncio.run(main())
        early = rss.phase_max_mib(0.15, 0.5)
        late = rss.phase_max_mib(0.67, 1.0)
        flush(gw.endpoint)
        if not long_run:  # the short run reads back a sample (GETs during the run verify too)
            keep = set(rnd.sample(sorted(ledger.blocks), min(200, len(ledger.blocks))))
            sample = Ledger({k: b for k, b in ledger.blocks.items() if k in keep})
            asyncio.run(verify_all(gw.endpoint, "load", sample))
            ledger.counts.update(sample.counts)
            ledger.wrong += sample.wrong
            ledger.durable_lost += sample.durable_lost
        else:
            asyncio.run(verify_all(gw.endpoint, "load", ledger))
        st = stats(gw.endpoint)
    finally:
        gw.cleanup()
    c = ledger.counts
    errors = sum(n for k, n in c.items() if k.startswith(("put_error", "get_error"))
                 or k in ("put_conn", "get_conn", "get_slowdown", "get_unavailable",
                          "unexpected_miss"))
    acked = sum(1 for b in ledger.blocks.values() if b.acked)
    lost = c["miss"]  # acknowledged blocks that read as misses in the final verification
    gib = sum(b.size for b in ledger.blocks.values() if b.acked) / 2**30
    flat = late <= early + SLACK_MIB
    reliability_report.record(
        "load", f"{tasks} concurrent S3 clients for {seconds:.0f} s", faults=0,
        requests=ledger.requests, wrong_bytes=len(ledger.wrong),
        durable_lost=len(ledger.durable_lost), peak_rss_mib=rss.peak_mib,
        held=errors == 0 and not ledger.wrong and not ledger.durable_lost and flat
        and not lost,
        note=f"seed {seed}; {acked} blocks ({gib:.2f} GiB) acknowledged; errors {errors}; "
             f"SlowDown retried {c['retried']}; RSS early max {early:.0f} MiB, late max "
             f"{late:.0f} MiB (slack {SLACK_MIB}); moto peak {moto_peak / 2**20:.0f} MiB; "
             f"segments sealed {st['segments_sealed']:.0f}, failed {st['segments_failed']:.0f}")
    assert errors == 0, dict(c)
    assert not ledger.wrong, ledger.wrong[:5]
    assert not ledger.durable_lost, ledger.durable_lost[:5]
    assert not lost, f"{c['miss']} acknowledged blocks read as misses"
    assert flat, (early, late, rss.samples[::10])
    assert acked > 50, dict(c)
