"""kill -9 of the gateway at random points under a steady S3 write/read load, then restart.

After every restart on the same store with the same --node-id:
- every block acknowledged durable (``x-s3kv-durability: sealed``) reads back byte for byte;
- every other block written reads back exactly or is a miss: never other bytes;
- no multipart upload is left on the backend (the restart aborts its own unfinished ones).

A second test kills the gateway while segment uploads are in flight (large blocks through a
proxy that slows the link to the S3 server), which is the multipart window.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.conftest import make_s3_client
from tests.reliability.conftest import Report
from tests.support.faultproxy import FaultProxy
from tests.support.gateway import SMALL, Gateway, backend_store, gateway_client
from tests.support.loadgen import (
    Ledger,
    LoadSpec,
    MiB,
    RssSampler,
    run_load,
    verify_all,
)
from tests.support.s3server import MotoServer

#: the long runs (--long) take minutes; pytest's default timeout is 300 s
pytestmark = pytest.mark.timeout(1800)


def _uploads(server: MotoServer, bucket: str) -> list[dict[str, Any]]:
    resp = make_s3_client(server.endpoint).list_multipart_uploads(Bucket=bucket)
    return list(resp.get("Uploads", []))


def _restart_and_verify(gw: Gateway, server: MotoServer, backend_bucket: str, bucket: str,
                        ledger: Ledger, gone: set[str]) -> tuple[int, int]:
    """Start the gateway again; check orphans and every block. Returns (orphans, misses)."""
    gw.start()  # answers /healthz only once the index is rebuilt and orphans aborted
    orphans = len(_uploads(server, backend_bucket))
    misses = asyncio.run(verify_all(gw.endpoint, bucket, ledger))
    gone.update(misses)
    return orphans, len(misses)


def _one_round(gw: Gateway, bucket: str, ledger: Ledger, rnd: random.Random, prefix: str,
               spec: LoadSpec, kill_after: float, kill_when: Any = None,
               after_kill: Any = None) -> Any:
    """Load the gateway, then kill -9 it at ``kill_after`` seconds (or once ``kill_when()``).

    Returns ``after_kill()`` called right after the kill (None without it)."""

    async def main() -> Any:
        stop = asyncio.Event()
        load = asyncio.create_task(run_load(gw.endpoint, bucket, ledger, rnd, prefix, spec,
                                            stop))
        t0 = time.monotonic()
        while time.monotonic() - t0 < kill_after:
            if kill_when is not None and await asyncio.to_thread(kill_when):
                break
            await asyncio.sleep(0.1)
        gw.kill()  # SIGKILL while requests are in flight
        seen = after_kill() if after_kill is not None else None
        stop.set()
        await asyncio.wait_for(load, 60)
        return seen

    return asyncio.run(main())


def test_kill9_under_load(s3_server: MotoServer, reliability_report: Report,
                          long_run: bool) -> None:
    kills = 15 if long_run else 3
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    backend_bucket = f"crash-{uuid.uuid4().hex[:10]}"
    store = backend_store(s3_server, backend_bucket)
    gw = Gateway(store, [*SMALL, "--node-id", f"crashy-{seed}", "--dram-cache", "0"])
    ledger = Ledger()
    gone: set[str] = set()
    orphans_seen = 0
    restarts = 0
    try:
        gw.start()
        gateway_client(gw.endpoint).create_bucket(Bucket="crash")
        with RssSampler(lambda: gw.pid) as rss:
            for r in range(kills):
                if r:
                    orphans, _ = _restart_and_verify(gw, s3_server, backend_bucket, "crash",
                                                     ledger, gone)
                    orphans_seen += orphans
                    restarts += 1
                spec = LoadSpec(tasks=4, durable_p=0.3)
                kill_after = rnd.uniform(1.0, 6.0 if long_run else 3.0)
                _one_round(gw, "crash", ledger, rnd, f"r{r}", spec, kill_after)
            orphans, _ = _restart_and_verify(gw, s3_server, backend_bucket, "crash", ledger,
                                             gone)
            orphans_seen += orphans
            restarts += 1
    finally:
        gw.cleanup()
    acked_durable = sum(1 for b in ledger.blocks.values() if b.acked and b.durable)
    row = reliability_report.record(
        "crash", "kill -9 under S3 load, restart, verify every block",
        faults=kills, requests=ledger.requests, wrong_bytes=len(ledger.wrong),
        durable_lost=len(ledger.durable_lost), peak_rss_mib=rss.peak_mib,
        held=not ledger.wrong and not ledger.durable_lost and not orphans_seen,
        note=f"seed {seed}; {len(ledger.blocks)} blocks, {acked_durable} acked durable, "
             f"{len(gone)} write-back lost; orphan uploads after restart: {orphans_seen}")
    assert not ledger.wrong, (seed, ledger.wrong[:5])
    assert not ledger.durable_lost, (seed, ledger.durable_lost[:5])
    assert orphans_seen == 0, row.note
    assert acked_durable > 0 and restarts == kills
    assert ledger.counts["put_ok"] > 20, ledger.counts


def test_kill9_during_segment_upload(s3_server: MotoServer, reliability_report: Report,
                                     long_run: bool) -> None:
    kills = 6 if long_run else 2
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    backend_bucket = f"crashmp-{uuid.uuid4().hex[:10]}"
    backend_store(s3_server, backend_bucket)
    ledger = Ledger()
    gone: set[str] = set()
    in_window = 0
    orphans_seen = 0
    with FaultProxy(s3_server.host, s3_server.port, seed=seed) as proxy:
        store = f"s3://{backend_bucket}/kv?endpoint={proxy.endpoint}"
        gw = Gateway(store, [*SMALL, "--node-id", f"mp-{seed}", "--dram-cache", "0",
                             "--seal-after", "3"])
        try:
            gw.start()
            gateway_client(gw.endpoint).create_bucket(Bucket="mpu")
            with RssSampler(lambda: gw.pid) as rss:
                r = 0
                while in_window < kills and r < 3 * kills:
                    if r:
                        proxy.clear()
                        orphans, _ = _restart_and_verify(gw, s3_server, backend_bucket, "mpu",
                                                         ledger, gone)
                        orphans_seen += orphans
                    # a slow link: a 5 MiB part takes ~1.5 s, so uploads stay open a while
                    proxy.set(bandwidth=3.5 * MiB)
                    spec = LoadSpec(tasks=3, durable_p=0.3, max_size=4 * MiB)

                    def uploading() -> bool:
                        return bool(_uploads(s3_server, backend_bucket))

                    def parts_in_flight() -> bool:
                        # an upload exists and has at least one part: kill inside the window
                        client = make_s3_client(s3_server.endpoint)
                        for up in _uploads(s3_server, backend_bucket):
                            try:
                                parts = client.list_parts(Bucket=backend_bucket, Key=up["Key"],
                                                          UploadId=up["UploadId"])
                            except ClientError:  # completed meanwhile
                                continue
                            if parts.get("Parts"):
                                return True
                        return False

                    if _one_round(gw, "mpu", ledger, rnd, f"m{r}", spec, 20.0,
                                  kill_when=parts_in_flight, after_kill=uploading):
                        in_window += 1
                    r += 1
                proxy.clear()
                orphans, _ = _restart_and_verify(gw, s3_server, backend_bucket, "mpu", ledger,
                                                 gone)
                orphans_seen += orphans
        finally:
            gw.cleanup()
    row = reliability_report.record(
        "crash", "kill -9 with segment multipart uploads in flight (slow link)",
        faults=r, requests=ledger.requests, wrong_bytes=len(ledger.wrong),
        durable_lost=len(ledger.durable_lost), peak_rss_mib=rss.peak_mib,
        held=not ledger.wrong and not ledger.durable_lost and not orphans_seen,
        note=f"seed {seed}; kills inside an open upload: {in_window}/{r}; "
             f"orphan uploads after restart: {orphans_seen}; write-back lost: {len(gone)}")
    assert not ledger.wrong, (seed, ledger.wrong[:5])
    assert not ledger.durable_lost, (seed, ledger.durable_lost[:5])
    assert orphans_seen == 0, row.note
    assert in_window == kills, row.note  # the multipart window was hit as often as asked
