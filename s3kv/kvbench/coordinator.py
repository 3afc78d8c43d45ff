"""Runs a ``bench kv``: setup, one OS process per rank, passes in lock-step, cleanup.

The coordinator creates the namespace (gateway, through its S3 front) or the bucket (S3),
starts the ranks (``python -m s3kv.kvbench.rank``), and for each pass reads the gateway's
``/v1/stats`` before and after, starts every rank at the same wall-clock time and shows one
progress bar for all of them. At the end it removes what the run wrote (unless kept) and stops
every rank process it started, also on errors and Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

import aiohttp
from tqdm import tqdm

from s3kv.errors import ConfigError
from s3kv.kvbench.rank import RankPass, RunSpec
from s3kv.kvbench.report import stats_delta
from s3kv.procs import module_argv
from s3kv.wire.sigv4 import Credentials
from warp.payload import PayloadSource
from warp.s3 import S3Client

#: a result line holds every latency of a pass; allow long lines
LINE_LIMIT = 256 << 20
START_DELAY_S = 0.3


class Coordinator:
    def __init__(self, spec: RunSpec, tier: str, keep: bool = False,
                 progress: bool = True) -> None:
        """``progress``: a bar per pass on stderr when it is a terminal (not with --json)."""
        self.spec = spec
        self.tier = tier
        self.keep = keep
        self.progress = progress
        self.warnings: list[str] = []
        self.procs: list[asyncio.subprocess.Process] = []

    # ---- the target ------------------------------------------------------------------------
    def _s3_client(self) -> tuple[S3Client, str, str]:
        """An S3 client for setup and cleanup: (client, bucket, prefix)."""
        payload = PayloadSource(0, base_size=4096)
        if self.spec.kind == "gateway":
            access, _, secret = (self.spec.token or "anonymous:anonymous").partition(":")
            client = S3Client([self.spec.target], Credentials(access, secret), payload,
                              connections=8)
            return client, self.spec.namespace, ""
        from s3kv.backends import parse_s3_url

        loc = parse_s3_url(self.spec.target)
        client = S3Client(loc.endpoints, Credentials.from_environment(loc.region), payload,
                          connections=8)
        return client, loc.bucket, f"{loc.prefix}{self.spec.run_prefix}"

    async def setup(self) -> None:
        if self.spec.kind == "gateway" and await self.stats() is None:
            raise ConfigError(f"gateway {self.spec.target} does not answer GET /v1/stats (is it "
                              "running? --token ACCESS:SECRET or S3KV_ACCESS_KEY/"
                              "S3KV_SECRET_KEY must match its front credentials)")
        client, bucket, _ = self._s3_client()
        async with client:
            r = await client.create_bucket(bucket)
        if r.error:
            what = "namespace" if self.spec.kind == "gateway" else "bucket"
            raise ConfigError(f"cannot create {what} {bucket!r} on {r.endpoint}: {r.error}")

    async def cleanup(self) -> None:
        client, bucket, prefix = self._s3_client()
        async with client:
            await client.delete_prefix(bucket, prefix)
            if self.spec.kind == "gateway":
                await client.request("DELETE", bucket, ok=(204, 200, 404, 409))

    async def stats(self) -> dict[str, float] | None:
        if self.spec.kind != "gateway":
            return None
        headers = {"Authorization": f"Bearer {self.spec.token}"} if self.spec.token else {}
        try:
            async with aiohttp.ClientSession(headers=headers) as s, \
                    s.get(f"{self.spec.target}/v1/stats") as resp:
                if resp.status != 200:
                    return None
                doc: dict[str, float] = await resp.json()
                return doc
        except (aiohttp.ClientError, OSError, ValueError):
            return None

    # ---- ranks ------------------------------------------------------------------------------
    async def start_ranks(self) -> None:
        for rank in range(self.spec.ranks):
            proc = await asyncio.create_subprocess_exec(
                *module_argv("s3kv.kvbench.rank"), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT)
            self.procs.append(proc)
            self._send(proc, {"spec": self.spec.to_dict(), "rank": rank})
        for proc in self.procs:
            if (await self._line(proc)).get("ready") is not True:
                raise ConfigError("a rank failed to start")

    @staticmethod
    def _send(proc: asyncio.subprocess.Process, doc: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(doc) + "\n").encode())

    @staticmethod
    async def _line(proc: asyncio.subprocess.Process) -> dict[str, Any]:
        assert proc.stdout is not None
        line = await proc.stdout.readline()
        if not line:
            code = await proc.wait()
            raise ConfigError(f"rank process {proc.pid} exited (code {code}); see its output "
                              "above")
        doc: dict[str, Any] = json.loads(line)
        return doc

    async def stop_ranks(self) -> None:
        for proc in self.procs:
            if proc.stdin is not None and not proc.stdin.is_closing():
                proc.stdin.close()
        for proc in self.procs:
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        self.procs = []

    async def one_pass(self, number: int, mode: str, duration: float, expect_turns: int,
                       ) -> list[RankPass]:
        desc = f"pass {number} ({mode})"
        total = round(duration) if mode == "fresh" else max(1, expect_turns)
        bar = tqdm(total=total, unit="s" if mode == "fresh" else "turn", desc=desc,
                   file=sys.stderr, disable=None if self.progress else True, leave=False)
        start_at = time.time() + START_DELAY_S
        for proc in self.procs:
            self._send(proc, {"pass": {"number": number, "mode": mode, "duration": duration,
                                       "start_at": start_at}})
        live: list[dict[str, int]] = [{} for _ in self.procs]
        results: list[RankPass | None] = [None] * len(self.procs)

        async def follow(i: int, proc: asyncio.subprocess.Process) -> None:
            while True:
                doc = await self._line(proc)
                if "result" in doc:
                    results[i] = RankPass.from_dict(doc["result"])
                    return
                live[i] = doc.get("progress", {})
                turns = sum(x.get("turns", 0) for x in live)
                hit = sum(x.get("hit_blocks", 0) for x in live)
                looked = sum(x.get("lookup_blocks", 0) for x in live)
                bar.n = (min(total, round(time.time() - start_at)) if mode == "fresh"
                         else min(total, turns))
                bar.set_postfix(turns=turns, hit=f"{hit / looked:.0%}" if looked else "-",
                                MiB_r=sum(x.get("read_bytes", 0) for x in live) >> 20,
                                MiB_w=sum(x.get("written_bytes", 0) for x in live) >> 20,
                                errors=sum(x.get("errors", 0) for x in live))
                bar.refresh()

        try:
            await asyncio.gather(*(follow(i, p) for i, p in enumerate(self.procs)))
        finally:
            bar.close()
        return [r for r in results if r is not None]

    # ---- the run ----------------------------------------------------------------------------
    async def run(self, duration: float, passes: int,
                  ) -> list[tuple[list[RankPass], dict[str, float] | None]]:
        await self.setup()
        out: list[tuple[list[RankPass], dict[str, float] | None]] = []
        try:
            await self.start_ranks()
            turns = 0
            for number in range(1, passes + 1):
                mode = "fresh" if number == 1 else "replay"
                before = await self.stats()
                results = await self.one_pass(number, mode, duration, turns)
                after = await self.stats()
                turns = sum(r.turns for r in results) if number == 1 else turns
                delta = stats_delta(before, after) if before and after else None
                self.check_tier(delta, number)
                out.append((results, delta))
        finally:
            await self.stop_ranks()
            if not self.keep:
                with contextlib.suppress(Exception):
                    await self.cleanup()
        return out

    def check_tier(self, delta: dict[str, float] | None, number: int) -> None:
        if delta is None:
            return
        dram = delta.get("dram_hits", 0.0) + delta.get("dram_misses", 0.0)
        if self.tier == "storage" and dram > 0:
            self.warnings.append(
                f"pass {number}: --tier storage, but the gateway has a DRAM tier (its "
                "--dram-cache): some reads were served from memory; restart it without "
                "--dram-cache for storage-only figures")
        if self.tier == "storage+dram" and dram == 0 and delta.get("hits", 0.0) > 0:
            self.warnings.append(
                f"pass {number}: --tier storage+dram, but the gateway served no read from a "
                "DRAM tier: start it with --dram-cache SIZE")
