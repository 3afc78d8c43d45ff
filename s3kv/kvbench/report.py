"""Figures of a ``bench kv`` pass from the ranks' results, as text or JSON.

Definitions (docs/kv-bench.md):

- **tokens/s read**: tokens of the blocks restored (read and verified) in the pass, over the
  pass's wall time (first rank start to last rank end); **written** likewise for blocks
  stored. A block holds ``block_tokens`` tokens. GiB/s are the same bytes (2^30 B).
- **hit ratio**: blocks found at lookup (the leading present blocks of each turn's context
  chain) over blocks looked up.
- **read latency**: per turn that restored at least one block, from the first read request to
  the last verified byte of the prefix (the MLPerf "read" of one cache entry). Percentiles are
  per rank; the **P95** of the run is the max over ranks of each rank's P95 (MLPerf's
  definition: a worst-client bound).
- **restore time**: lookup + read, per turn that restored a prefix.
- Percentiles: the value at sorted index ``min(n - 1, floor(p * n))`` (no interpolation), the
  convention of :func:`warp.analysis.aggregate.percentile`.
"""

from __future__ import annotations

import math
from typing import Any

from s3kv.kvbench.rank import RankPass
from s3kv.sizes import GiB, format_size
from warp.analysis.aggregate import percentile

#: gateway /v1/stats counters whose change over a pass is reported
STAT_KEYS = ("hits", "misses", "dram_hits", "dram_misses", "backend_reads",
             "backend_read_bytes", "backend_bytes_written", "bytes_accepted", "blocks_put",
             "checksum_failures", "backpressure_rejections", "backend_errors",
             "segments_sealed", "segments_failed", "blocks_lost")


def pct(values: list[float], p: float) -> float:
    return percentile(sorted(values), p)


def latency(values: list[float]) -> dict[str, float]:
    return {"count": len(values), "p50": pct(values, 0.50), "p95": pct(values, 0.95),
            "p99": pct(values, 0.99)}


def stats_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in STAT_KEYS if k in after}


def pass_report(results: list[RankPass], block_tokens: int,
                gateway: dict[str, float] | None) -> dict[str, Any]:
    """The JSON figures of one pass (all ranks)."""
    start = min(r.started_ns for r in results)
    end = max(r.ended_ns for r in results)
    elapsed = max(end - start, 1) / 1e9
    read_blocks = sum(r.read.blocks for r in results)
    read_bytes = sum(r.read.bytes for r in results)
    written_blocks = sum(r.written.blocks for r in results)
    written_bytes = sum(r.written.bytes for r in results)
    lookup = sum(r.lookup_blocks for r in results)
    hits = sum(r.hit_blocks for r in results)
    per_rank: list[dict[str, Any]] = [{"rank": r.rank, "turns": r.turns, "read": latency(r.read_ms)}
                for r in sorted(results, key=lambda r: r.rank)]
    rank_p95 = [x["read"]["p95"] for x in per_rank if x["read"]["count"]]
    errors = sum(r.read.errors + r.written.errors + r.lookup_errors for r in results)
    first_error = next((e for r in results for e in (r.read.first_error, r.written.first_error)
                        if e), "")
    doc: dict[str, Any] = {
        "pass": results[0].number, "mode": results[0].mode, "elapsed_s": elapsed,
        "turns": sum(r.turns for r in results),
        "conversations": sum(r.conversations for r in results),
        "lookup_blocks": lookup, "hit_blocks": hits,
        "hit_ratio": hits / lookup if lookup else math.nan,
        "read_blocks": read_blocks, "read_bytes": read_bytes,
        "written_blocks": written_blocks, "written_bytes": written_bytes,
        "read_tokens_s": read_blocks * block_tokens / elapsed,
        "write_tokens_s": written_blocks * block_tokens / elapsed,
        "tokens_s": (read_blocks + written_blocks) * block_tokens / elapsed,
        "read_gib_s": read_bytes / GiB / elapsed,
        "write_gib_s": written_bytes / GiB / elapsed,
        "read_latency_ms": latency([v for r in results for v in r.read_ms]),
        "read_latency_per_rank_ms": per_rank,
        "p95_read_ms_max_of_ranks": max(rank_p95) if rank_p95 else math.nan,
        "restore_ms": latency([v for r in results for v in r.restore_ms]),
        "write_latency_ms": latency([v for r in results for v in r.write_ms]),
        "read_missing": sum(r.read.missing for r in results),
        "verify_failures": sum(r.read.verify_failures for r in results),
        "errors": errors, "first_error": first_error,
        "retries": sum(r.read.retries + r.written.retries for r in results),
    }
    if gateway is not None:
        doc["gateway"] = gateway
        dram = gateway.get("dram_hits", 0.0) + gateway.get("dram_misses", 0.0)
        doc["dram_hit_ratio"] = gateway.get("dram_hits", 0.0) / dram if dram else None
    return doc


def _ms(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:,.1f}"


def to_text(header: dict[str, Any], passes: list[dict[str, Any]]) -> str:
    h = header
    lines = [
        f"s3kv bench kv: {h['kind']} target {h['target']}",
        f"  {h['model']}: {h['bytes_per_token']:,} B/token, {h['block_tokens']} tokens/block "
        f"= {format_size(h['block_bytes'])} blocks (tp {h['tp']})",
        f"  {h['ranks']} rank(s) x {h['users']} users, {h['turns']} turns per conversation, "
        f"context {h['context']} tokens, system prompt {h['system_prompt_tokens']} tokens "
        f"shared by {h['shared_share']:.0%} of users, seed {h['seed']}, tier {h['tier']}",
    ]
    for p in passes:
        lines += [
            "",
            f"pass {p['pass']} ({p['mode']}, {p['elapsed_s']:.1f} s): {p['turns']} turns, "
            f"{p['conversations']} whole conversations",
            f"  tokens/s     read {p['read_tokens_s']:,.0f}   written {p['write_tokens_s']:,.0f}"
            f"   total {p['tokens_s']:,.0f}",
            f"  GiB/s        read {p['read_gib_s']:.3f}   written {p['write_gib_s']:.3f}",
            f"  hit ratio    {p['hit_ratio']:.1%} of looked-up blocks "
            f"({p['hit_blocks']:,} of {p['lookup_blocks']:,})",
            "  read latency per rank (ms, per restored prefix):",
            "    rank  reads     p50       p95       p99",
        ]
        for r in p["read_latency_per_rank_ms"]:
            x = r["read"]
            lines.append(f"    {r['rank']:>4}  {x['count']:>5}  {_ms(x['p50']):>8}  "
                         f"{_ms(x['p95']):>8}  {_ms(x['p99']):>8}")
        rs = p["restore_ms"]
        wr = p["write_latency_ms"]
        lines += [
            f"  P95 read latency (max of per-rank P95, MLPerf): "
            f"{_ms(p['p95_read_ms_max_of_ranks'])} ms",
            f"  restore a prefix (lookup + read): p50 {_ms(rs['p50'])} ms, p95 {_ms(rs['p95'])} "
            f"ms ({rs['count']} restores)",
            f"  write per turn: p50 {_ms(wr['p50'])} ms, p95 {_ms(wr['p95'])} ms",
        ]
        if "gateway" in p:
            g = p["gateway"]
            dram = p.get("dram_hit_ratio")
            lines.append(
                f"  gateway: {g.get('hits', 0):,.0f} block hits, {g.get('misses', 0):,.0f} "
                f"misses, {g.get('backend_reads', 0):,.0f} ranged GETs "
                f"({g.get('backend_read_bytes', 0) / GiB:.2f} GiB), DRAM hit ratio "
                + ("-" if dram is None else f"{dram:.1%}"))
        problems = p["errors"] + p["read_missing"] + p["verify_failures"]
        lines.append(f"  errors {p['errors']}, missing at read {p['read_missing']}, "
                     f"verify failures {p['verify_failures']}, retries {p['retries']}"
                     + (f"; first error: {p['first_error']}" if problems and p["first_error"]
                        else ""))
    for w in header.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"
