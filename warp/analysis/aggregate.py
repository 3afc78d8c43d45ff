"""Warp's analysis on records, plus exact whole-run figures.

Windowed (Warp) figures, per operation type:

- time is cut into ``bucket_s`` (1 s) buckets from the first start of that operation type over
  all clients, so clients' buckets are summed by second; the first and last ``trim_s`` (2 s) of
  the run are dropped, and only whole buckets in between count;
- each successful operation's bytes (and objects) are spread over its duration, in proportion
  to how much of it falls in each bucket; failed operations add nothing (they are counted);
- median = the upper median of the bucket throughputs (sorted, index ``n // 2``, no
  interpolation), fastest / slowest = the highest / lowest bucket, average = their mean;
- request latency and time-to-first-byte percentiles over the successful operations that
  started and ended inside the window.

Whole-run (exact) figures: all successful operations, nothing dropped; throughput is their
bytes over the span from the first start to the last end.

Every percentile here is the value at sorted index ``min(n - 1, floor(p * n))``: no
interpolation, so p50 is the upper median, as for the buckets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from s3kv.errors import ConfigError
from warp.records import Record, read_records

NS = 1_000_000_000


def percentile(values: Sequence[float], p: float) -> float:
    """Value at sorted index ``min(n-1, floor(p*n))`` of ``values`` (which must be sorted)."""
    if not values:
        return math.nan
    return values[min(len(values) - 1, math.floor(p * len(values)))]


@dataclass(frozen=True)
class Percentiles:
    """Milliseconds."""

    count: int
    p50: float
    p90: float
    p99: float
    mean: float
    fastest: float
    slowest: float

    @classmethod
    def of_ns(cls, values_ns: Iterable[int]) -> Percentiles | None:
        v = sorted(x / 1e6 for x in values_ns)
        if not v:
            return None
        return cls(len(v), percentile(v, 0.5), percentile(v, 0.9), percentile(v, 0.99),
                   sum(v) / len(v), v[0], v[-1])


@dataclass(frozen=True)
class AnalysisOptions:
    bucket_s: float = 1.0
    trim_s: float = 2.0
    op: str = ""  # only this operation type (empty: all)

    def __post_init__(self) -> None:
        if self.bucket_s * NS < 1:  # buckets are whole nanoseconds
            raise ConfigError("--bucket-duration must be positive, e.g. 1s")


@dataclass(frozen=True)
class OpAnalysis:
    op: str
    ops: int
    errors: int
    verify_failures: int
    clients: int
    threads: int
    endpoints: tuple[str, ...]
    avg_size: float
    first_error: str
    # ---- windowed, Warp's semantics ---------------------------------------------------
    bucket_s: float
    trim_s: float
    window_start_ns: int
    window_end_ns: int
    buckets_bps: tuple[float, ...]  # bytes/s per bucket, in time order
    buckets_ops: tuple[float, ...]  # objects/s per bucket
    median_bps: float
    fastest_bps: float
    slowest_bps: float
    average_bps: float
    median_ops: float
    fastest_ops: float
    slowest_ops: float
    average_ops: float
    latency: Percentiles | None
    ttfb: Percentiles | None
    # ---- whole run, exact -----------------------------------------------------------------
    run_start_ns: int
    run_end_ns: int
    run_bytes: int
    run_bps: float
    run_ops_s: float
    run_latency: Percentiles | None
    run_ttfb: Percentiles | None
    errors_by_kind: dict[str, int] = field(default_factory=dict)


def _spread(records: list[Record], start_ns: int, nbuckets: int, width_ns: int,
            ) -> tuple[list[float], list[float]]:
    """Bytes and objects of successful ops spread over their durations into buckets."""
    by = [0.0] * nbuckets
    objs = [0.0] * nbuckets
    end_ns = start_ns + nbuckets * width_ns
    for r in records:
        if r.error or r.end_ns < start_ns or r.start_ns >= end_ns:
            continue
        dur = r.end_ns - r.start_ns
        if dur <= 0:
            k = (r.start_ns - start_ns) // width_ns
            if 0 <= k < nbuckets:
                by[k] += r.size
                objs[k] += r.n_objects
            continue
        first = max(0, (r.start_ns - start_ns) // width_ns)
        last = min(nbuckets - 1, (r.end_ns - 1 - start_ns) // width_ns)
        for k in range(first, last + 1):
            b0 = start_ns + k * width_ns
            overlap = min(r.end_ns, b0 + width_ns) - max(r.start_ns, b0)
            if overlap > 0:
                share = overlap / dur
                by[k] += r.size * share
                objs[k] += r.n_objects * share
    return by, objs


def analyze_op(op: str, records: list[Record], opts: AnalysisOptions) -> OpAnalysis:
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    run_start = min(r.start_ns for r in records)
    run_end = max(r.end_ns for r in records)
    width = int(opts.bucket_s * NS)
    w_start = run_start + int(opts.trim_s * NS)
    nbuckets = max(0, (run_end - int(opts.trim_s * NS) - w_start) // width)
    w_end = w_start + nbuckets * width
    by, objs = _spread(records, w_start, nbuckets, width)
    bps = [b / opts.bucket_s for b in by]
    ops_s = [o / opts.bucket_s for o in objs]
    sorted_bps, sorted_ops = sorted(bps), sorted(ops_s)
    inside = [r for r in ok if r.start_ns >= w_start and r.end_ns <= w_end]
    span_s = max(run_end - run_start, 1) / NS
    kinds: dict[str, int] = {}
    for r in failed:
        kind = r.error.split(":")[0][:60]
        kinds[kind] = kinds.get(kind, 0) + 1
    return OpAnalysis(
        op=op, ops=len(records), errors=len(failed),
        verify_failures=sum(r.verify_failed for r in failed),
        clients=len({r.client_id for r in records}),
        threads=len({(r.client_id, r.thread) for r in records}),
        endpoints=tuple(sorted({r.endpoint for r in records})),
        avg_size=sum(r.size for r in ok) / len(ok) if ok else 0.0,
        first_error=failed[0].error if failed else "",
        bucket_s=opts.bucket_s, trim_s=opts.trim_s, window_start_ns=w_start, window_end_ns=w_end,
        buckets_bps=tuple(bps), buckets_ops=tuple(ops_s),
        median_bps=percentile(sorted_bps, 0.5),
        fastest_bps=sorted_bps[-1] if bps else math.nan,
        slowest_bps=sorted_bps[0] if bps else math.nan,
        average_bps=sum(bps) / len(bps) if bps else math.nan,
        median_ops=percentile(sorted_ops, 0.5),
        fastest_ops=sorted_ops[-1] if ops_s else math.nan,
        slowest_ops=sorted_ops[0] if ops_s else math.nan,
        average_ops=sum(ops_s) / len(ops_s) if ops_s else math.nan,
        latency=Percentiles.of_ns(r.duration_ns for r in inside),
        ttfb=Percentiles.of_ns(t for r in inside if (t := r.ttfb_ns) is not None),
        run_start_ns=run_start, run_end_ns=run_end, run_bytes=sum(r.size for r in ok),
        run_bps=sum(r.size for r in ok) / span_s,
        run_ops_s=sum(r.n_objects for r in ok) / span_s,
        run_latency=Percentiles.of_ns(r.duration_ns for r in ok),
        run_ttfb=Percentiles.of_ns(t for r in ok if (t := r.ttfb_ns) is not None),
        errors_by_kind=kinds,
    )


def analyze(records: Iterable[Record], opts: AnalysisOptions | None = None) -> list[OpAnalysis]:
    """One analysis per operation type, in order of first appearance."""
    opts = opts or AnalysisOptions()
    by_op: dict[str, list[Record]] = {}
    for r in records:
        if not opts.op or r.op.upper() == opts.op.upper():
            by_op.setdefault(r.op, []).append(r)
    return [analyze_op(op, recs, opts) for op, recs in by_op.items()]


def analyze_files(paths: Iterable[str | Path], opts: AnalysisOptions | None = None,
                  ) -> list[OpAnalysis]:
    """Records of several files (one per client, say) analysed as one run.

    A client writes one file per run, so a client id found in an earlier file is another
    client here (two `s3kv bench` runs both record as c1): it is told apart by its file."""
    records: list[Record] = []
    seen: set[str] = set()
    for p in paths:
        found = read_records(p)
        clash = seen & {r.client_id for r in found}
        for r in found:
            if r.client_id in clash:
                r.client_id = f"{r.client_id}@{p}"
        seen |= {r.client_id for r in found}
        records.extend(found)
    return analyze(records, opts)
