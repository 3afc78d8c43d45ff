"""Render analyses as text (Warp-like), JSON and CSV."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from typing import Any

from warp.analysis.aggregate import OpAnalysis, Percentiles
from warp.units import format_rate


def _num(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 6)


def _pct_text(label: str, p: Percentiles | None) -> str:
    if p is None:
        return f" * {label}: none recorded"
    return (f" * {label}: p50 {p.p50:.2f} ms, p90 {p.p90:.2f} ms, p99 {p.p99:.2f} ms "
            f"(fastest {p.fastest:.2f}, slowest {p.slowest:.2f}, {p.count} ops)")


def to_text(results: list[OpAnalysis]) -> str:
    out: list[str] = []
    for a in results:
        size = f", avg {a.avg_size / 2**20:.2f} MiB per op" if a.avg_size else ""
        out.append(f"Operation: {a.op} -- {a.ops} ops, {a.clients} client(s), {a.threads} "
                   f"thread(s), {len(a.endpoints)} endpoint(s){size}")
        out.append(f" * Errors: {a.errors} (verification failures: {a.verify_failures})"
                   + (f"; first: {a.first_error}" if a.first_error else ""))
        n = len(a.buckets_bps)
        out.append(f"Warp analysis ({a.bucket_s:g} s buckets, first and last {a.trim_s:g} s "
                   f"dropped, {n} bucket(s), each op's bytes spread over its duration):")
        if n == 0:
            out.append(" * run too short for one whole bucket after trimming")
        else:
            if a.avg_size:
                out.append(f" * Throughput: median {format_rate(a.median_bps)}, average "
                           f"{format_rate(a.average_bps)}, fastest {format_rate(a.fastest_bps)},"
                           f" slowest {format_rate(a.slowest_bps)}")
            out.append(f" * Objects/s: median {a.median_ops:.2f}, average {a.average_ops:.2f}, "
                       f"fastest {a.fastest_ops:.2f}, slowest {a.slowest_ops:.2f}")
        out.append(_pct_text("Request latency (ops inside the window)", a.latency))
        if a.ttfb is not None:
            out.append(_pct_text("Time to first byte (ops inside the window)", a.ttfb))
        span = (a.run_end_ns - a.run_start_ns) / 1e9
        out.append(f"Whole run, exact (all successful ops, nothing dropped, {span:.2f} s):")
        if a.avg_size:
            out.append(f" * Throughput: {format_rate(a.run_bps)} ({a.run_bytes} bytes)")
        out.append(f" * Objects/s: {a.run_ops_s:.2f}")
        out.append(_pct_text("Request latency", a.run_latency))
        if a.run_ttfb is not None:
            out.append(_pct_text("Time to first byte", a.run_ttfb))
        out.append("")
    return "\n".join(out) if out else "no records\n"


def to_dict(a: OpAnalysis) -> dict[str, Any]:
    d = dataclasses.asdict(a)
    for k, v in d.items():
        if isinstance(v, float):
            d[k] = _num(v)
    d["buckets_bps"] = [_num(x) for x in a.buckets_bps]
    d["buckets_ops"] = [_num(x) for x in a.buckets_ops]
    d["endpoints"] = list(a.endpoints)
    d["semantics"] = {
        "windowed": "Warp: 1 s buckets from the first start, first/last trim_s dropped, bytes "
                    "spread over op duration, median = upper median (index n//2), latency/ttfb "
                    "over ops inside the window",
        "run": "exact: all successful ops, no trimming; run_bps = bytes / (last end - first "
               "start)",
        "percentile": "value at sorted index min(n-1, floor(p*n)), no interpolation",
    }
    return d


def to_json(results: list[OpAnalysis]) -> str:
    return json.dumps({"operations": [to_dict(a) for a in results]}, indent=2)


CSV_COLUMNS = ("op", "ops", "errors", "verify_failures", "clients", "threads", "avg_size",
               "buckets", "median_bps", "average_bps", "fastest_bps", "slowest_bps",
               "median_ops", "fastest_ops", "slowest_ops", "latency_p50_ms", "latency_p90_ms",
               "latency_p99_ms", "ttfb_p50_ms", "ttfb_p90_ms", "ttfb_p99_ms", "run_bps",
               "run_ops_s", "run_latency_p50_ms", "run_latency_p90_ms", "run_latency_p99_ms",
               "run_ttfb_p50_ms", "run_ttfb_p90_ms", "run_ttfb_p99_ms")


def _pcols(prefix: str, p: Percentiles | None) -> dict[str, Any]:
    return {f"{prefix}_p{q}_ms": (None if p is None else getattr(p, f"p{q}"))
            for q in (50, 90, 99)}


def to_csv(results: list[OpAnalysis]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for a in results:
        row: dict[str, Any] = {
            "op": a.op, "ops": a.ops, "errors": a.errors, "verify_failures": a.verify_failures,
            "clients": a.clients, "threads": a.threads, "avg_size": a.avg_size,
            "buckets": len(a.buckets_bps), "median_bps": _num(a.median_bps),
            "average_bps": _num(a.average_bps), "fastest_bps": _num(a.fastest_bps),
            "slowest_bps": _num(a.slowest_bps), "median_ops": _num(a.median_ops),
            "fastest_ops": _num(a.fastest_ops), "slowest_ops": _num(a.slowest_ops),
            "run_bps": _num(a.run_bps), "run_ops_s": _num(a.run_ops_s),
        }
        row |= _pcols("latency", a.latency) | _pcols("ttfb", a.ttfb)
        row |= _pcols("run_latency", a.run_latency) | _pcols("run_ttfb", a.run_ttfb)
        w.writerow(row)
    return buf.getvalue()
