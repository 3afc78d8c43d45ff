"""The gateway benchmark's timed phases (benchmarks/gateway.py runs them): block PUT/GET
throughput on both sides (``benchmarks.harness.S3Side``), and the session restore through the
native batch API.

Every timed run starts with the page cache written back (``settle_disk``), and every byte read
back is compared with what was written.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from benchmarks import cores
from benchmarks.harness import (
    CPUMeter,
    Progress,
    S3Side,
    mib_s,
    payloads,
    run_concurrently,
    settle_disk,
)
from s3kv.client import BlockBody, S3KVClient
from s3kv.errors import Backpressure
from s3kv.models import block_bytes

KiB = 1024
MiB = 1024 * KiB
GW_ACCESS = "s3kvbench"
GW_SECRET = "s3kvbench-secret"
MODEL = "qwen2.5-7b"
BLOCK_TOKENS = 16
SESSION_TOKENS = 10_000

Costing = Callable[[tuple[dict[str, Any], dict[str, Any]], int], dict[str, Any]]


async def throughput(gw: S3Side, direct: S3Side, size: int, n: int, concurrency: int,
                     say: Progress, costing: Costing | None = None) -> dict[str, Any]:
    """PUT then GET ``n`` blocks of ``size`` on each side; with ``costing`` (and the sides'
    ``sample`` set) each side's PUT and GET phase costs are added under ``{side}_put_...`` and
    ``{side}_get_...`` keys."""
    blocks = payloads(n, size)
    total = n * size
    out: dict[str, Any] = {}
    tag = f"{size // KiB}KiB" if size < MiB else f"{size // MiB}MiB"
    for side in (direct, gw):  # same keys on both; a fresh prefix per phase
        prefix = f"{tag}-c{concurrency}-{uuid.uuid4().hex[:6]}/"
        keys = [f"{prefix}{i:05d}" for i in range(n)]
        put_s = await side.put_all(keys, blocks, concurrency)
        if costing is not None and side.last_put is not None:
            out.update({f"{side.name}_put_{k}": v for k, v in
                        costing(side.last_put, total).items()})
        get_s = await side.get_all(keys, blocks, concurrency)
        if costing is not None and side.last_get is not None:
            out.update({f"{side.name}_get_{k}": v for k, v in
                        costing(side.last_get, total).items() if k != "server_bytes_in_per_GiB"})
        out[f"{side.name}_put_MiBps"] = round(mib_s(total, put_s), 1)
        out[f"{side.name}_get_MiBps"] = round(mib_s(total, get_s), 1)
    out["put_ratio"] = round(out["gateway_put_MiBps"] / out["direct_put_MiBps"], 3)
    out["get_ratio"] = round(out["gateway_get_MiBps"] / out["direct_get_MiBps"], 3)
    say(f"  {tag} c={concurrency}: PUT gateway {out['gateway_put_MiBps']} MiB/s vs direct "
        f"{out['direct_put_MiBps']} (x{out['put_ratio']}); GET gateway "
        f"{out['gateway_get_MiBps']} vs direct {out['direct_get_MiBps']} (x{out['get_ratio']})")
    return out


def restore_cpu(meter: CPUMeter | None, run: str, before: dict[str, float], seconds: float
                ) -> dict[str, float]:
    """CPU-seconds each process spent on one restore (``restore_{run}_{process}_cpu_s``; also
    the machine's, its interrupts' and what ran outside them: ``machine``, ``interrupts``,
    ``other``), how busy that kept the server: its CPU-seconds per second of the restore (about
    1 with ``--split-cores``: the storage core was the bound), and each CPU
    (``restore_{run}_cpu{i}_busy``)."""
    if meter is None:
        return {}
    cpu = meter.delta(before, meter.sample())
    out = {f"restore_{run}_{name}_cpu_s": round(v, 3) for name, v in cpu.items()
           if not name.startswith("cpu")}
    out[f"restore_{run}_server_busy"] = round(cpu["server"] / seconds, 3) if seconds else 0.0
    out.update({f"restore_{run}_{k}": v for k, v in cores.busy(cpu, seconds).items()})
    return out


async def restore(gw_url: str, gw: S3Side, direct: S3Side, tokens: int, batch: int | None,
                  batch_concurrency: int, say: Progress, meter: CPUMeter | None = None,
                  block_tokens: int = BLOCK_TOKENS) -> dict[str, float]:
    """Restore the session, in blocks of ``block_tokens`` tokens, by batch gets of ``batch``
    keys (None: the whole chain in one request) and by per-block GETs; with ``meter``, the CPU
    each process spent on each (:func:`restore_cpu`)."""
    bsize = block_bytes(MODEL, block_tokens)
    n = -(-tokens // block_tokens)
    batch = batch or n
    blocks = payloads(n, bsize)
    ns = gw.bucket
    chain = [f"session-{uuid.uuid4().hex[:8]}/{i:05d}" for i in range(n)]
    token = f"{GW_ACCESS}:{GW_SECRET}"
    # untimed: the session is written once to each side (gateway: batch puts, then a flush)
    async with S3KVClient(gw_url, token=token, connections=batch_concurrency + 1) as kv:
        i = 0
        while i < n:
            try:
                i += await kv.put_many(ns, list(zip(chain[i:i + 32], blocks[i:i + 32],
                                                    strict=True)))
            except Backpressure as exc:  # 503 SlowDown: wait as asked, send what is left
                i += exc.stored
                await asyncio.sleep(exc.retry_after)
        await kv.flush()
    await direct.put_all(chain, blocks, 8)
    # untimed: read other data (the warm-up's objects) straight from the server first. The
    # first reads after writing 2 x 547 MiB ran 20-65 % slower on s3rver, whichever side they
    # were (a /tmp experiment alternating the order; most likely V8 collecting the writes'
    # garbage on the next allocations), so the side timed first paid for both
    await direct.get_all(*direct.warm, 8)

    async with S3KVClient(gw_url, token=token, connections=batch_concurrency + 1,
                          timeout=600, direct_reads=False) as kv:
        await settle_disk()
        cpu0 = meter.sample() if meter is not None else {}
        t0 = time.perf_counter()
        present = await kv.lookup_prefix(ns, chain)
        starts = list(range(0, present, batch))
        bad: list[str] = []

        async def one(j: int) -> None:  # each block is received into one buffer, checked and
            s = starts[j]                # dropped, as the per-block side does
            buf = bytearray(bsize)  # compared as a bytearray: a memcmp (a memoryview's == goes
            view = memoryview(buf)  # item by item)

            async def check(i: int, body: BlockBody | None) -> None:
                if body is None:  # a miss: not done, counted below
                    return
                if body.length != bsize:
                    bad.append(chain[s + i])
                    return
                await body.readinto(view)
                if buf != blocks[s + i]:
                    bad.append(chain[s + i])

            done = await kv.fetch(ns, chain[s:s + batch], check)
            bad.extend(chain[s + i] for i, ok in enumerate(done) if not ok)

        await run_concurrently(len(starts), batch_concurrency, one)
        batch_s = time.perf_counter() - t0
        costs = restore_cpu(meter, "batch", cpu0, batch_s)
    if present != n or bad:
        raise RuntimeError(f"batch restore read back wrong data ({present}/{n} present, "
                           f"{len(bad)} blocks wrong)")
    cpu0 = meter.sample() if meter is not None else {}
    per_block_s = await direct.get_all(chain, blocks, 8)
    costs.update(restore_cpu(meter, "per_block", cpu0, per_block_s))
    gw_per_block_s = await gw.get_all(chain, blocks, 8)
    out = {
        "restore_blocks": n, "restore_block_bytes": bsize,
        "restore_batch_s": round(batch_s, 3),
        "restore_per_block_direct_c8_s": round(per_block_s, 3),
        "restore_per_block_gateway_c8_s": round(gw_per_block_s, 3),
        "restore_ratio": round(per_block_s / batch_s, 3),
        "restore_ratio_vs_gateway_s3": round(gw_per_block_s / batch_s, 3),
        **costs,
    }
    say(f"  restore {tokens} tokens ({n} x {bsize // KiB} KiB): batch get {out['restore_batch_s']}"
        f" s vs per-block GETs c=8 {out['restore_per_block_direct_c8_s']} s direct "
        f"(x{out['restore_ratio']}), {out['restore_per_block_gateway_c8_s']} s via the S3 front")
    if meter is not None:
        say(f"  restore's server CPU: batch {out['restore_batch_server_cpu_s']} s (busy "
            f"{out['restore_batch_server_busy']}), per-block "
            f"{out['restore_per_block_server_cpu_s']} s (busy "
            f"{out['restore_per_block_server_busy']})")
    return out


async def warm_up(gw: S3Side, direct: S3Side, requests: int, segment_bytes: int) -> None:
    """Untimed, before the first phase, the same on both sides: ``requests`` PUTs and GETs
    (at least a segment's worth through the gateway, flushed). The gateway's part buffers are
    then allocated, as in one that has been running, and the server's request paths are warm
    (s3rver is JavaScript: its first thousand 256 KiB PUTs ran at 32 MiB/s, later ones at 45,
    so a cold server flattered whichever side came second)."""
    n = max(requests, segment_bytes // (256 * KiB))
    blocks = payloads(n, 256 * KiB)
    for side in (direct, gw):
        keys = [f"warm/{i:05d}" for i in range(n)]
        await side.put_all(keys, blocks, 8)
        await side.get_all(keys, blocks, 8)
        side.warm = (keys, blocks)
