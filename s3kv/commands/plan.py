"""``s3kv plan``: capacity, endurance and throughput arithmetic for a KV-cache tier.

The arithmetic is in :mod:`s3kv.planning`; this module turns flags into
:class:`~s3kv.planning.PlanInputs` and prints the :class:`~s3kv.planning.Plan` as a table or JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from s3kv.argtypes import arg_type
from s3kv.errors import ConfigError
from s3kv.models import model_names
from s3kv.planning import TB, Plan, PlanInputs, plan
from s3kv.sizes import parse_size

_DEFAULTS = PlanInputs()


def register(subparsers: Any) -> None:
    d = _DEFAULTS
    p = subparsers.add_parser(
        "plan",
        help="capacity, endurance and throughput arithmetic for a model and a drive/node setup",
        description=(
            "Capacity, endurance and throughput arithmetic for a KV-cache tier: KV bytes per "
            "token, raw/usable capacity, sessions per TB, TB per rack unit, watts per PB, the "
            "DWPD write budget (bytes/day, GB/s, tokens/s of new KV cache), years until the "
            "rating is reached at a write rate, and the write-bandwidth ceiling. Units are "
            "decimal, as drive vendors rate drives: 1 TB = 10^12 B, 1 PB = 10^15 B, "
            "1 GB/s = 10^9 B/s, 1 MB/s = 10^6 B/s; a year is 365 days. Defaults are the "
            "seed's QLC node (24 x 122.88 TB QLC, 0.6 DWPD over 5 years, 3,000 MB/s write "
            "each, 2U, 1,600 W PSU, md RAID-0). Formulas: docs/planning.md."
        ),
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--model", default=d.model, metavar="NAME",
        help=f"model whose bf16 KV geometry gives the bytes per token: {', '.join(model_names())} "
             f"(default: {d.model})",
    )
    src.add_argument(
        "--bytes-per-token", type=arg_type(parse_size), default=None, metavar="SIZE",
        help="KV bytes per token before any codec, instead of --model: bytes or a size "
             "such as 128KiB or 320KiB (default: from --model)",
    )
    p.add_argument(
        "--codec-ratio", type=float, default=d.codec_ratio, metavar="X",
        help="compression ratio of the block codec; stored bytes = KV bytes / X "
             f"(e.g. 1.08 zstd, 3.8 kvq 4-bit; default: {d.codec_ratio:g}, no codec)",
    )
    p.add_argument(
        "--drive-tb", type=_drive_size, default=d.drive_tb, metavar="TB",
        help="capacity per drive in decimal TB, or a size with a unit such as 30.72TB "
             f"or 60TiB (default: {d.drive_tb:g} TB)",
    )
    p.add_argument(
        "--drives", type=int, default=d.drives_per_node, metavar="N",
        help=f"drives per node (default: {d.drives_per_node})",
    )
    p.add_argument(
        "--nodes", type=int, default=d.nodes, metavar="N",
        help=f"nodes in the fleet (default: {d.nodes})",
    )
    p.add_argument(
        "--dwpd", type=float, default=d.dwpd, metavar="X",
        help=f"rated drive writes per day over the warranty (default: {d.dwpd:g})",
    )
    p.add_argument(
        "--warranty-years", type=float, default=d.warranty_years, metavar="Y",
        help=f"warranty period the DWPD rating covers, years (default: {d.warranty_years:g})",
    )
    p.add_argument(
        "--drive-write-mbs", type=float, default=d.drive_write_mbs, metavar="MB/S",
        help="sequential write bandwidth per drive, MB/s = 10^6 B/s "
             f"(default: {d.drive_write_mbs:g})",
    )
    p.add_argument(
        "--rack-units", type=float, default=d.rack_units_per_node, metavar="U",
        help=f"rack units per node (default: {d.rack_units_per_node:g})",
    )
    p.add_argument(
        "--psu-watts", type=float, default=d.psu_watts_per_node, metavar="W",
        help=f"nameplate PSU capacity per node, watts (default: {d.psu_watts_per_node:g})",
    )
    p.add_argument(
        "--context-tokens", type=int, default=d.context_tokens, metavar="N",
        help="tokens of KV cache one session keeps, for sessions per TB "
             f"(default: {d.context_tokens})",
    )
    p.add_argument(
        "--write-rate", type=float, default=None, metavar="TOKENS/S",
        help="new KV cache written to the whole fleet, tokens/s, spread evenly over the nodes; "
             "gives the years until the DWPD rating is reached (default: none)",
    )
    p.add_argument(
        "--ec-parity", type=int, default=d.ec_parity, metavar="M",
        help="MinIO erasure-coding parity drives per erasure set; usable = raw x (S - M) / S "
             f"(default: {d.ec_parity}, no erasure coding: md RAID-0 as in the seed, no "
             "redundancy; MinIO's own default is EC:4 on sets of 8 to 16 drives)",
    )
    p.add_argument(
        "--ec-stripe", type=int, default=None, metavar="S",
        help="drives per erasure set (MinIO's stripe size, as `mc admin info` shows it); "
             "required with --ec-parity > 0 (default: none)",
    )
    p.add_argument(
        "--write-amplification", type=float, default=d.write_amplification, metavar="X",
        help="drive bytes written per stored byte beyond erasure coding, e.g. segment "
             f"compaction (default: {d.write_amplification:g})",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inputs = PlanInputs(
        model=args.model,
        kv_bytes_per_token=args.bytes_per_token,
        codec_ratio=args.codec_ratio,
        drive_tb=args.drive_tb,
        drives_per_node=args.drives,
        nodes=args.nodes,
        dwpd=args.dwpd,
        warranty_years=args.warranty_years,
        drive_write_mbs=args.drive_write_mbs,
        rack_units_per_node=args.rack_units,
        psu_watts_per_node=args.psu_watts,
        context_tokens=args.context_tokens,
        write_rate_tokens_s=args.write_rate,
        ec_parity=args.ec_parity,
        ec_stripe=args.ec_stripe,
        write_amplification=args.write_amplification,
    )
    result = plan(inputs)
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_text(result, inputs, sys.stdout)
    return 0


def _drive_size(text: str) -> float:
    """A plain number is decimal TB (checked as one by PlanInputs: positive, finite); a number
    with a unit is a size (30.72TB, 60TiB)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_size(text) / TB
    except ConfigError:
        raise argparse.ArgumentTypeError(
            f"invalid drive size {text!r}: write decimal TB (122.88) or a size with a unit "
            "(30.72TB, 60TiB)") from None


def _n(x: float, digits: int = 2) -> str:
    return f"{x:,.{digits}f}"


def render_text(p: Plan, inputs: PlanInputs, out: TextIO) -> None:
    """The plan as a readable table: quantity, per node, whole fleet, unit."""
    rows: list[tuple[str, str, str, str] | str] = []

    def row(label: str, node: str, fleet: str, unit: str) -> None:
        rows.append((label, node, fleet, unit))

    rows.append("KV cache")
    row("KV bytes per token (uncompressed)", "", f"{p.kv_bytes_per_token_uncompressed:,}", "B")
    row("codec ratio", "", f"{p.codec_ratio:g}", "x")
    row("KV bytes per token (stored)", "", _n(p.kv_bytes_per_token, 1), "B")
    row(f"one session ({p.context_tokens:,} tokens)", "", _n(p.session_bytes / 1e9, 3), "GB")
    rows.append(f"Capacity (erasure coding: {p.erasure})")
    row("drives", f"{p.drives_per_node}", f"{p.drives_total}", "")
    row("raw capacity", _n(p.raw_tb_per_node), _n(p.raw_tb_total), "TB")
    row("usable capacity", _n(p.usable_tb_per_node), _n(p.usable_tb_total), "TB")
    row("sessions per TB", "", f"{p.sessions_per_tb:,}", "sessions/TB")
    row("sessions held", f"{p.sessions_per_node:,}", f"{p.sessions_total:,}", "sessions")
    rows.append("Density and power (nameplate)")
    row("rack units", f"{inputs.rack_units_per_node:g}", f"{p.rack_units_total:g}", "U")
    row("raw TB per rack unit", "", _n(p.tb_per_rack_unit), "TB/U")
    row("PSU capacity", f"{inputs.psu_watts_per_node:,.0f}", f"{p.psu_watts_total:,.0f}", "W")
    row("watts per raw PB", "", _n(p.watts_per_pb, 1), "W/PB")
    rows.append(f"Endurance ({inputs.dwpd:g} DWPD over {inputs.warranty_years:g} years)")
    row("rated writes per drive", "", _n(p.rated_pbw_per_drive), "PB")
    row("drive bytes per stored KV byte", "", _n(p.drive_bytes_per_kv_byte, 3), "x")
    row("write budget", _n(p.write_budget_pb_per_day_per_node, 3),
        _n(p.write_budget_pb_per_day_total, 3), "PB/day")
    row("write budget", _n(p.write_budget_bytes_per_day_per_node / TB),
        _n(p.write_budget_bytes_per_day_total / TB), "TB/day")
    row("write budget", _n(p.write_budget_gb_s_per_node), _n(p.write_budget_gb_s_total),
        "GB/s")
    row("write budget as new KV cache", f"{p.write_budget_tokens_s_per_node:,.0f}",
        f"{p.write_budget_tokens_s_total:,.0f}", "tokens/s")
    rows.append(f"Write bandwidth ceiling ({inputs.drive_write_mbs:g} MB/s per drive)")
    row("write ceiling", _n(p.write_ceiling_gb_s_per_node), _n(p.write_ceiling_gb_s_total),
        "GB/s")
    row("write ceiling as new KV cache", f"{p.write_ceiling_tokens_s_per_node:,.0f}",
        f"{p.write_ceiling_tokens_s_total:,.0f}", "tokens/s")
    row("years to DWPD rating at the ceiling", "", _n(p.years_to_rating_at_ceiling), "years")
    rows.append("At the given write rate")
    if p.write_rate_tokens_s is None:
        row("write rate", "", "none (--write-rate TOKENS/S)", "")
    else:
        assert p.write_rate_gb_s is not None and p.drive_write_gb_s is not None
        assert p.budget_used_fraction is not None and p.years_to_rating is not None
        n = p.nodes
        row("write rate", f"{p.write_rate_tokens_s / n:,.0f}", f"{p.write_rate_tokens_s:,.0f}",
            "tokens/s")
        row("KV written", _n(p.write_rate_gb_s / n, 3), _n(p.write_rate_gb_s, 3), "GB/s")
        row("drive writes", _n(p.drive_write_gb_s / n, 3), _n(p.drive_write_gb_s, 3), "GB/s")
        row("share of the write budget", "", f"{100 * p.budget_used_fraction:,.1f}", "%")
        row("years to DWPD rating", "", _n(p.years_to_rating), "years")

    out.write(
        f"s3kv plan: {p.model}, {p.nodes} node(s) x {p.drives_per_node} drives x "
        f"{inputs.drive_tb:g} TB (decimal units: TB = 10^12 B, GB/s = 10^9 B/s; "
        "year = 365 days)\n"
    )
    widths = [0, len("per node"), len("fleet")]
    for r in rows:
        if isinstance(r, tuple):
            widths = [max(w, len(c)) for w, c in zip(widths, r[:3], strict=True)]
    header = f"\n{'':<{widths[0] + 4}}{'per node':>{widths[1]}}  {'fleet':>{widths[2]}}\n"
    out.write(header)
    for r in rows:
        if isinstance(r, str):
            out.write(f"{r}\n")
        else:
            label, node, fleet, unit = r
            line = f"  {label:<{widths[0]}}  {node:>{widths[1]}}  {fleet:>{widths[2]}}  {unit}"
            out.write(line.rstrip() + "\n")
    for warning in p.warnings:
        out.write(f"warning: {warning}\n")
