"""``s3kv tune``: measure object layouts on an S3 endpoint and recommend the gateway's.

A *layout* is (segment size S, part size P, concurrency C). For each layout measured:

- **PUT**: segment-sized objects written as multipart uploads of P-sized parts (as the gateway
  writes segments; P = S, one part, is one PUT as the gateway then writes it), C parts in
  flight in total: one upload at a time with C parts in flight when an object has at least C
  parts, else ceil(C / parts) uploads at once sharing the C. New objects start until the PUT
  phase's time is up; uploads in flight finish. Throughput = bytes of completed objects / wall
  time of the phase.
- **ranged GET**: C readers GET block-sized ranges (``--block-size``, default 2 MiB) at
  block-aligned random offsets of the objects just written, as the gateway restores blocks.
  Throughput = bytes / wall time; time to first byte (TTFB) p50/p99 per request.

Layouts are explored coordinate by coordinate so the run stays inside ``--budget``: every
segment size at the middle part size and concurrency, then every part size at the chosen
segment size, then every concurrency at the chosen segment and part size. A layout whose one
object would take more than twice its share of the budget at the best PUT rate seen so far is
skipped, and so is everything once the budget is spent.

The recommendation rule (:func:`recommend`), over every measured row:

1. score = min(PUT / best PUT, GET / best GET): the row's throughput relative to the best
   of each, limited by the weaker of the two;
2. TTFB bound = max(``ttfb_factor`` x the lowest TTFB p99, lowest TTFB p99 + ``ttfb_slack_ms``)
   (defaults 2 and 10 ms); rows above it are out;
3. eligible = the remaining rows with score >= (1 - ``tolerance``) x their best score
   (default tolerance 5 %);
4. recommended = the eligible row with the smallest segment size, then the smallest
   concurrency, then the largest part size (fewer requests).

Percentiles use :func:`warp.analysis.aggregate.percentile` (sorted index floor(p * n)).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from s3kv.config import Settings
from s3kv.errors import ConfigError
from s3kv.sizes import MiB, format_size
from s3kv.wire.sigv4 import Credentials
from warp.analysis.aggregate import percentile
from warp.payload import PayloadSource, variant_of
from warp.s3 import S3Client

S3_MIN_PART = 5 * MiB
MAX_PARTS = 10_000


@dataclass(frozen=True)
class TuneSpec:
    endpoints: tuple[str, ...]
    bucket: str
    segment_sizes: tuple[int, ...] = (16 * MiB, 64 * MiB, 256 * MiB, 512 * MiB)
    part_sizes: tuple[int, ...] = (8 * MiB, 16 * MiB, 32 * MiB)
    concurrency: tuple[int, ...] = (1, 4, 16)
    block_size: int = 2 * MiB
    budget: float = 60.0
    tolerance: float = 0.05
    ttfb_factor: float = 2.0
    ttfb_slack_ms: float = 10.0
    prefix: str = "s3kv-tune"
    region: str = ""
    seed: int = 7

    def validate(self) -> None:
        if not self.endpoints:
            raise ConfigError("--endpoint is required")
        for ep in self.endpoints:
            if not ep.startswith(("http://", "https://")):
                raise ConfigError(f"endpoint {ep!r} must start with http:// or https://")
        if any(p < S3_MIN_PART for p in self.part_sizes):
            raise ConfigError("part sizes must be at least 5MiB (the S3 minimum part)")
        if not self.segment_sizes or not self.part_sizes or not self.concurrency:
            raise ConfigError("give at least one segment size, part size and concurrency")
        if min(self.concurrency) < 1 or self.block_size < 1 or self.budget <= 0:
            raise ConfigError("concurrency, block size and budget must be positive")
        # the rule's parameters, checked before the run: out of these ranges the rule may
        # leave no layout eligible (no recommendation from a full run) or every one
        if not (math.isfinite(self.tolerance) and 0 <= self.tolerance < 1):
            raise ConfigError(f"--tolerance must be at least 0 and below 1 (a share of the best "
                              f"score, 0.05 = 5 %), got {self.tolerance}")
        if not (math.isfinite(self.ttfb_factor) and self.ttfb_factor >= 1):
            raise ConfigError(f"--ttfb-factor must be at least 1 (a multiple of the lowest TTFB "
                              f"p99), got {self.ttfb_factor}")
        if not (math.isfinite(self.ttfb_slack_ms) and self.ttfb_slack_ms >= 0):
            raise ConfigError(f"--ttfb-slack-ms must be at least 0 (milliseconds over the lowest "
                              f"TTFB p99), got {self.ttfb_slack_ms}")
        if not self.layouts_possible():
            raise ConfigError("no segment size is a multiple of a part size")

    def layouts_possible(self) -> bool:
        return any(valid(s, p) for s in self.segment_sizes for p in self.part_sizes)


def valid(segment: int, part: int) -> bool:
    """The gateway needs segment_size to be a multiple of part_size (and S3 <= 10,000 parts)."""
    return part <= segment and segment % part == 0 and segment // part <= MAX_PARTS


@dataclass
class Row:
    segment_size: int
    part_size: int
    concurrency: int
    put_bps: float = math.nan
    get_bps: float = math.nan
    ttfb_p50_ms: float = math.nan
    ttfb_p99_ms: float = math.nan
    get_p99_ms: float = math.nan
    objects: int = 0
    gets: int = 0
    errors: int = 0
    first_error: str = ""
    skipped: str = ""
    score: float = math.nan

    @property
    def measured(self) -> bool:
        return not self.skipped and self.objects > 0 and self.gets > 0

    def key(self) -> tuple[int, int, int]:
        return self.segment_size, self.part_size, self.concurrency


@dataclass
class Recommendation:
    row: Row | None
    reason: str
    ttfb_bound_ms: float = math.nan
    eligible: list[tuple[int, int, int]] = field(default_factory=list)


def recommend(rows: list[Row], tolerance: float = 0.05, ttfb_factor: float = 2.0,
              ttfb_slack_ms: float = 10.0) -> Recommendation:
    """The rule in the module docstring; sets each measured row's ``score``."""
    done = [r for r in rows if r.measured]
    if not done:
        return Recommendation(None, "no layout could be measured")
    best_put = max(r.put_bps for r in done)
    best_get = max(r.get_bps for r in done)
    for r in done:
        r.score = min(r.put_bps / best_put if best_put else 0.0,
                      r.get_bps / best_get if best_get else 0.0)
    low = min(r.ttfb_p99_ms for r in done)
    bound = max(ttfb_factor * low, low + ttfb_slack_ms)
    bounded = [r for r in done if r.ttfb_p99_ms <= bound]
    top = max(r.score for r in bounded)
    eligible = [r for r in bounded if r.score >= (1 - tolerance) * top]
    pick = min(eligible, key=lambda r: (r.segment_size, r.concurrency, -r.part_size))
    reason = (
        f"smallest segment size (then lowest concurrency, then largest part) among layouts "
        f"within {tolerance:.0%} of the best score {top:.3f} (score = min(PUT / best PUT "
        f"{best_put / MiB:.1f} MiB/s, GET / best GET {best_get / MiB:.1f} MiB/s)) with TTFB "
        f"p99 <= {bound:.1f} ms (max({ttfb_factor:g} x lowest {low:.1f} ms, lowest + "
        f"{ttfb_slack_ms:g} ms)); {len(eligible)} of {len(done)} measured layouts qualify")
    return Recommendation(pick, reason, bound, [r.key() for r in eligible])


def gateway_settings(row: Row) -> dict[str, Any]:
    """The Settings fields the recommendation sets (validated with Settings)."""
    out: dict[str, Any] = {
        "segment_size": format_size(row.segment_size),
        "part_size": format_size(row.part_size),
        "max_parts_in_flight": row.concurrency,
    }
    default_block = Settings().max_block_size
    if default_block > row.segment_size // 2:  # Settings requires max_block_size <= S / 2
        out["max_block_size"] = format_size(row.segment_size // 2)
    Settings.load({k: v for k, v in out.items()}, env={})
    return out


def to_toml(settings: dict[str, Any], comment: str) -> str:
    lines = [f"# {line}" for line in comment.splitlines()]
    for k, v in settings.items():
        lines.append(f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v}")
    return "\n".join(lines) + "\n"


class Tuner:
    def __init__(self, spec: TuneSpec, progress: Callable[[str], None] | None = None) -> None:
        spec.validate()
        self.spec = spec
        self.progress = progress or (lambda _msg: None)
        self.run_prefix = f"{spec.prefix.strip('/')}/{uuid.uuid4().hex[:8]}/"
        self.rows: list[Row] = []
        self.rng = random.Random(spec.seed)
        self.payload = PayloadSource(spec.seed)

    async def run(self) -> list[Row]:
        s = self.spec
        conns = max(s.concurrency) + 8
        creds = Credentials.from_environment(s.region)
        async with S3Client(s.endpoints, creds, self.payload, connections=conns,
                            retries=2) as client:
            r = await client.create_bucket(s.bucket)
            if r.error:
                raise ConfigError(f"cannot create bucket {s.bucket!r}: {r.error}")
            try:
                await self._explore(client)
            finally:
                await client.delete_prefix(s.bucket, self.run_prefix)
        return self.rows

    def _plan_rows(self) -> int:
        s = self.spec
        return len(s.segment_sizes) + len(s.part_sizes) + len(s.concurrency) - 2

    async def _explore(self, client: S3Client) -> None:
        s = self.spec
        self.deadline = time.monotonic() + s.budget
        self.per_row = s.budget / max(1, self._plan_rows())
        mid_part = sorted(s.part_sizes)[len(s.part_sizes) // 2]
        mid_conc = sorted(s.concurrency)[len(s.concurrency) // 2]
        for seg in sorted(s.segment_sizes):
            parts = [p for p in s.part_sizes if valid(seg, p)]
            if parts:
                part = mid_part if mid_part in parts else min(parts, key=lambda p:
                                                              abs(p - mid_part))
                await self._row(client, seg, part, mid_conc)
        best = self._current_pick()
        if best is None:
            return
        for part in sorted(s.part_sizes):
            if valid(best.segment_size, part):
                await self._row(client, best.segment_size, part, best.concurrency)
        best = self._current_pick() or best
        for conc in sorted(s.concurrency):
            await self._row(client, best.segment_size, best.part_size, conc)

    def _current_pick(self) -> Row | None:
        s = self.spec
        return recommend(self.rows, s.tolerance, s.ttfb_factor, s.ttfb_slack_ms).row

    async def _row(self, client: S3Client, seg: int, part: int, conc: int) -> None:
        if any(r.key() == (seg, part, conc) for r in self.rows):
            return
        row = Row(seg, part, conc)
        self.rows.append(row)
        left = self.deadline - time.monotonic()
        rates = [r.put_bps for r in self.rows if r.measured]
        if left <= 0:
            row.skipped = "budget spent"
            return
        if rates and seg / max(rates) > 2 * self.per_row:
            row.skipped = (f"one object takes ~{seg / max(rates):.0f} s at the best PUT rate, "
                           "over twice this layout's share of the budget")
            return
        label = f"{format_size(seg)}/{format_size(part)}/c{conc}"
        self.progress(f"{label}: PUT")
        keys = await self._put_phase(client, row, self.per_row * 0.6)
        if keys:
            self.progress(f"{label}: ranged GET")
            await self._get_phase(client, row, keys, self.per_row * 0.4)
        await client.delete_prefix(self.spec.bucket, self._row_prefix(row))

    def _row_prefix(self, row: Row) -> str:
        return f"{self.run_prefix}{row.segment_size}-{row.part_size}-{row.concurrency}/"

    async def _put_phase(self, client: S3Client, row: Row, seconds: float) -> list[str]:
        parts = -(-row.segment_size // row.part_size)
        uploads = 1 if parts >= row.concurrency else -(-row.concurrency // parts)
        # C parts in flight in total, shared out over the uploads (3-part objects at C = 4:
        # 2 + 2, not 3 + 3)
        shares = [row.concurrency // uploads + (i < row.concurrency % uploads)
                  for i in range(uploads)]
        keys: list[str] = []
        done_bytes = 0
        t0 = time.monotonic()
        stop = t0 + seconds
        seq = 0

        async def uploader(in_flight: int) -> None:
            nonlocal seq, done_bytes
            while True:
                seq += 1
                key = f"{self._row_prefix(row)}obj-{seq:05d}"
                if parts == 1:  # as the gateway writes a one-part segment: one PUT
                    r = await client.put_object(self.spec.bucket, key, variant_of(key),
                                                row.segment_size)
                else:
                    r = await client.multipart_put(self.spec.bucket, key, variant_of(key),
                                                   row.segment_size, row.part_size, in_flight)
                if r.error:
                    row.errors += 1
                    row.first_error = row.first_error or r.error
                    return
                keys.append(key)
                done_bytes += row.segment_size
                if time.monotonic() >= stop:
                    return

        await asyncio.gather(*(uploader(share) for share in shares))
        elapsed = max(time.monotonic() - t0, 1e-9)
        row.objects = len(keys)
        row.put_bps = done_bytes / elapsed if keys else math.nan
        return keys

    async def _get_phase(self, client: S3Client, row: Row, keys: list[str],
                         seconds: float) -> None:
        block = min(self.spec.block_size, row.segment_size)
        slots = row.segment_size // block
        ttfb: list[float] = []
        lat: list[float] = []
        got = 0
        t0 = time.monotonic()
        stop = t0 + seconds
        min_ops = 4 * row.concurrency

        async def reader() -> None:
            nonlocal got
            while time.monotonic() < stop or len(lat) < min_ops:
                key = self.rng.choice(keys)
                offset = self.rng.randrange(slots) * block
                want = self.payload.expected(variant_of(key), offset, block)
                r = await client.get_object(self.spec.bucket, key, want, offset, block)
                if r.error:
                    row.errors += 1
                    row.first_error = row.first_error or r.error
                    if row.errors > 10:
                        return
                    continue
                got += r.size
                ttfb.append((r.first_byte_ns - r.start_ns) / 1e6)
                lat.append((r.end_ns - r.start_ns) / 1e6)

        await asyncio.gather(*(reader() for _ in range(row.concurrency)))
        elapsed = max(time.monotonic() - t0, 1e-9)
        row.gets = len(lat)
        if lat:
            ttfb.sort()
            lat.sort()
            row.get_bps = got / elapsed
            row.ttfb_p50_ms = percentile(ttfb, 0.5)
            row.ttfb_p99_ms = percentile(ttfb, 0.99)
            row.get_p99_ms = percentile(lat, 0.99)


def row_dict(row: Row) -> dict[str, Any]:
    d = asdict(row)
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}
