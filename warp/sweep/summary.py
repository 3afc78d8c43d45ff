"""Sweep results: per-phase figures, the table, scaling efficiency, knee and saturation.

Rules (stated in every output):

- scaling efficiency ``E(n) = T(n) / (n * T(1))`` with T the median throughput;
- knee: the largest client count n such that every step up to n added at least half of one
  client's throughput (``T(k) - T(k-1) >= 0.5 * T(1)`` for all k <= n);
- saturation: the smallest n from which no later step is more than 3 % faster
  (``T(m) <= 1.03 * T(n)`` for all m > n); "not reached" when that is only the last step.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from s3kv.errors import ConfigError
from warp.units import gib_s

KNEE_GAIN = 0.5
SATURATION_GAIN = 0.03
RULES = {
    "efficiency": "E(n) = T(n) / (n * T(1)), T = median throughput",
    "knee": "largest n with T(k) - T(k-1) >= 0.5 * T(1) for every k <= n",
    "saturation": "smallest n with T(m) <= 1.03 * T(n) for all m > n (not reached if only the "
                  "last step qualifies)",
}


@dataclass(frozen=True)
class PhaseResult:
    op: str
    clients: int
    concurrency: int
    records: str
    ops: int
    errors: int
    verify_failures: int
    median_bps: float
    fastest_bps: float
    slowest_bps: float
    run_bps: float
    ttfb_p50_ms: float | None
    ttfb_p99_ms: float | None
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    buckets: int
    interrupted: bool = False


def efficiency(points: Sequence[tuple[int, float]]) -> list[float | None]:
    if not points or points[0][1] <= 0 or math.isnan(points[0][1]):
        return [None] * len(points)
    n1, t1 = points[0]
    per_client = t1 / n1
    return [t / (n * per_client) if not math.isnan(t) else None for n, t in points]


def knee(points: Sequence[tuple[int, float]]) -> int | None:
    if len(points) < 2 or math.isnan(points[0][1]) or points[0][1] <= 0:
        return None
    n1, t1 = points[0]
    one_client = t1 / n1
    best = points[0][0]
    for (na, ta), (nb, tb) in itertools.pairwise(points):
        if math.isnan(tb) or (tb - ta) < KNEE_GAIN * one_client * (nb - na):
            break
        best = nb
    return best


def saturation(points: Sequence[tuple[int, float]]) -> int | None:
    for i, (n, t) in enumerate(points[:-1]):
        later = [tm for _, tm in points[i + 1:]]
        if not math.isnan(t) and all(tm <= (1 + SATURATION_GAIN) * t for tm in later):
            return n
    return None


@dataclass(frozen=True)
class Row:
    clients: int
    total_concurrency: int
    put: PhaseResult | None
    get: PhaseResult | None


def table(phases: Sequence[PhaseResult]) -> list[Row]:
    by_n: dict[int, dict[str, PhaseResult]] = {}
    conc: dict[int, int] = {}
    for p in phases:
        by_n.setdefault(p.clients, {})[p.op.upper()] = p
        conc[p.clients] = p.concurrency
    return [Row(n, conc[n], by_n[n].get("PUT"), by_n[n].get("GET")) for n in sorted(by_n)]


def curve(rows: Sequence[Row], op: str) -> list[tuple[int, float]]:
    out = []
    for r in rows:
        p = r.put if op == "PUT" else r.get
        if p is not None:
            out.append((r.clients, p.median_bps))
    return out


def scaling(rows: Sequence[Row], op: str) -> dict[str, Any]:
    pts = curve(rows, op)
    return {"clients": [n for n, _ in pts], "efficiency": efficiency(pts), "knee": knee(pts),
            "saturation": saturation(pts)}


CSV_COLUMNS = ("clients", "total_concurrency", "put_gib_s", "get_gib_s",
               "put_fastest_gib_s", "put_slowest_gib_s", "get_fastest_gib_s",
               "get_slowest_gib_s", "put_ttfb_p50_ms", "put_ttfb_p99_ms", "get_ttfb_p50_ms",
               "get_ttfb_p99_ms", "put_errors", "get_errors", "put_verify_failures",
               "get_verify_failures", "put_efficiency", "get_efficiency")


def _g(x: float) -> float | None:
    return None if math.isnan(x) else round(gib_s(x), 6)


def csv_rows(rows: Sequence[Row]) -> list[dict[str, Any]]:
    eff = {op: dict(zip([n for n, _ in curve(rows, op)], efficiency(curve(rows, op)),
                        strict=True)) for op in ("PUT", "GET")}
    out = []
    for r in rows:
        d: dict[str, Any] = {"clients": r.clients, "total_concurrency": r.total_concurrency}
        for op, p in (("put", r.put), ("get", r.get)):
            d[f"{op}_gib_s"] = _g(p.median_bps) if p else None
            d[f"{op}_fastest_gib_s"] = _g(p.fastest_bps) if p else None
            d[f"{op}_slowest_gib_s"] = _g(p.slowest_bps) if p else None
            d[f"{op}_ttfb_p50_ms"] = p.ttfb_p50_ms if p else None
            d[f"{op}_ttfb_p99_ms"] = p.ttfb_p99_ms if p else None
            d[f"{op}_errors"] = p.errors if p else None
            d[f"{op}_verify_failures"] = p.verify_failures if p else None
            e = eff[op.upper()].get(r.clients)
            d[f"{op}_efficiency"] = round(e, 4) if e is not None else None
        out.append(d)
    return out


def to_csv(rows: Sequence[Row]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for d in csv_rows(rows):
        w.writerow({k: ("" if v is None else v) for k, v in d.items()})
    return buf.getvalue()


def to_json(phases: Sequence[PhaseResult], meta: dict[str, Any]) -> str:
    rows = table(phases)
    doc = {**meta, "rules": RULES, "table": csv_rows(rows),
           "scaling": {"put": scaling(rows, "PUT"), "get": scaling(rows, "GET")},
           "phases": [_clean(asdict(p)) for p in phases]}
    return json.dumps(doc, indent=2)


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def _cell(p: PhaseResult | None, unit: float) -> str:
    if p is None or math.isnan(p.median_bps):
        return "-"
    return f"{p.median_bps / unit:.2f}"


def to_text(phases: Sequence[PhaseResult]) -> str:
    rows = table(phases)
    big = any(p.median_bps >= 2**30 for p in phases if not math.isnan(p.median_bps))
    unit, uname = (2**30, "GiB/s") if big else (2**20, "MiB/s")
    eff = {op: dict(zip([n for n, _ in curve(rows, op)], efficiency(curve(rows, op)),
                        strict=True)) for op in ("PUT", "GET")}
    lines = [f"{'Clients':>7}  {'Total Concurrency':>17}  {'PUT (' + uname + ')':>13}  "
             f"{'GET (' + uname + ')':>13}  {'E_put(n)':>8}  {'E_get(n)':>8}  {'Errors':>6}"]
    for r in rows:
        errs = sum(p.errors for p in (r.put, r.get) if p is not None)
        ep, eg = eff["PUT"].get(r.clients), eff["GET"].get(r.clients)
        lines.append(f"{r.clients:>7}  {r.total_concurrency:>17}  {_cell(r.put, unit):>13}  "
                     f"{_cell(r.get, unit):>13}  {'-' if ep is None else f'{ep:.2f}':>8}  "
                     f"{'-' if eg is None else f'{eg:.2f}':>8}  {errs:>6}")
    lines.append("")
    for op in ("PUT", "GET"):
        pts = curve(rows, op)
        if not pts:
            continue
        k, s = knee(pts), saturation(pts)
        lines.append(f"{op}: knee at {k if k is not None else '-'} client(s); saturation "
                     f"{'at ' + str(s) + ' client(s)' if s is not None else 'not reached'}")
    lines.append(f"Rules: {RULES['efficiency']}; knee = {RULES['knee']}; "
                 f"saturation = {RULES['saturation']}.")
    lines.append("Throughput = median of 1 s buckets (Warp), whiskers in the plot = slowest "
                 "and fastest bucket.")
    return "\n".join(lines) + "\n"


def read_reference(path: str | Path) -> list[tuple[int, float, float]]:
    """A reference curve: CSV with clients, put_gib_s, get_gib_s columns (GiB/s)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read reference {path}: {exc}") from None
    rows = list(csv.DictReader(io.StringIO(text)))
    try:
        return [(int(r["clients"]), float(r["put_gib_s"] or "nan"),
                 float(r["get_gib_s"] or "nan")) for r in rows]
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"reference {path} needs columns clients, put_gib_s, get_gib_s: "
                          f"{exc}") from None
