"""Capacity, endurance and throughput arithmetic for a KV-cache tier (``s3kv plan``).

Pure functions over dataclasses: :class:`PlanInputs` in, :class:`Plan` out. No I/O.
Every formula is written out in ``docs/planning.md``.

Units are decimal, as drive vendors rate drives: 1 TB = 10**12 B, 1 PB = 10**15 B,
1 GB/s = 10**9 B/s, 1 MB/s = 10**6 B/s. A day is 86,400 s and a year 365 days (the DWPD ->
TBW convention). Defaults are the seed's QLC node: 24 x 122.88 TB QLC drives rated 0.6 DWPD
over 5 years, 3,000 MB/s sequential write each, 2U, one 1,600 W PSU, md RAID-0 (no redundancy,
usable = raw).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from s3kv.errors import ConfigError
from s3kv.models import get_model

__all__ = [
    "DAYS_PER_YEAR",
    "GB",
    "MB",
    "PB",
    "SECONDS_PER_DAY",
    "TB",
    "Plan",
    "PlanInputs",
    "plan",
]

MB = 10**6
GB = 10**9
TB = 10**12
PB = 10**15
SECONDS_PER_DAY = 86_400
DAYS_PER_YEAR = 365
#: the erasure set sizes MinIO builds (cmd/endpoint-ellipses.go: setSizes)
MIN_EC_STRIPE = 2
MAX_EC_STRIPE = 16


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """A model and a drive/node/fleet configuration. Defaults: the seed's QLC node."""

    #: model name from s3kv.models (labels the plan; gives the bytes per token unless
    #: ``kv_bytes_per_token`` is set)
    model: str = "llama3.1-8b"
    #: KV bytes per token before any codec; overrides the model's figure (model -> "custom")
    kv_bytes_per_token: int | None = None
    #: stored bytes = KV bytes / codec_ratio (1.0 = none; zstd ~1.1; kvq 4-bit ~3.8)
    codec_ratio: float = 1.0
    drive_tb: float = 122.88  # decimal TB per drive (nominal)
    drives_per_node: int = 24
    nodes: int = 1
    dwpd: float = 0.6  # rated drive writes per day over the warranty
    warranty_years: float = 5.0
    drive_write_mbs: float = 3000.0  # sequential write per drive, MB/s (10**6 B/s)
    rack_units_per_node: float = 2.0
    psu_watts_per_node: float = 1600.0  # nameplate PSU capacity
    context_tokens: int = 10_000  # tokens of KV cache one session keeps
    #: new KV cache written to the whole tier, tokens/s (None: no write-rate figures)
    write_rate_tokens_s: float | None = None
    #: MinIO erasure coding: parity drives per erasure set (0 = none, RAID-0-like as the seed)
    ec_parity: int = 0
    #: drives per erasure set (MinIO "stripe size", as `mc admin info` shows); needed with parity
    ec_stripe: int | None = None
    #: drive bytes written per stored byte beyond erasure coding (compaction, rewrites); >= 1
    write_amplification: float = 1.0

    def __post_init__(self) -> None:
        _positive_int("drives", self.drives_per_node)
        _positive_int("nodes", self.nodes)
        _positive_int("context tokens", self.context_tokens)
        if self.kv_bytes_per_token is not None:
            _positive_int("bytes per token", self.kv_bytes_per_token)
        for name, value in (
            ("codec ratio", self.codec_ratio),
            ("drive TB", self.drive_tb),
            ("DWPD", self.dwpd),
            ("warranty years", self.warranty_years),
            ("drive write MB/s", self.drive_write_mbs),
            ("rack units", self.rack_units_per_node),
            ("PSU watts", self.psu_watts_per_node),
        ):
            _positive(name, value)
        if self.write_rate_tokens_s is not None:
            _positive("write rate (tokens/s)", self.write_rate_tokens_s)
        if not (math.isfinite(self.write_amplification) and self.write_amplification >= 1.0):
            raise ConfigError(
                f"write amplification must be >= 1.0, got {self.write_amplification}"
            )
        if isinstance(self.ec_parity, bool) or not isinstance(self.ec_parity, int) or (
            self.ec_parity < 0
        ):
            raise ConfigError(f"EC parity must be an integer >= 0, got {self.ec_parity}")
        if self.ec_stripe is None:
            if self.ec_parity:
                raise ConfigError(
                    f"EC parity {self.ec_parity} needs --ec-stripe, the drives per erasure set "
                    "(MinIO's stripe size, as `mc admin info` shows it)"
                )
            return
        # a stripe is checked also without parity (EC:0): a set size MinIO cannot build is a
        # mistake either way
        _positive_int("EC stripe", self.ec_stripe)
        if not MIN_EC_STRIPE <= self.ec_stripe <= MAX_EC_STRIPE:
            raise ConfigError(
                f"EC stripe {self.ec_stripe} is not an erasure set size MinIO builds: "
                f"{MIN_EC_STRIPE} to {MAX_EC_STRIPE} drives"
            )
        if self.ec_parity * 2 > self.ec_stripe:
            raise ConfigError(
                f"EC parity {self.ec_parity} is more than half of the {self.ec_stripe}-drive "
                "erasure set (MinIO allows at most stripe/2)"
            )
        total = self.drives_per_node * self.nodes
        if total % self.ec_stripe:
            raise ConfigError(
                f"{total} drives do not split into erasure sets of {self.ec_stripe} drives"
            )

    def resolved_bytes_per_token(self) -> tuple[str, int]:
        """(model label, KV bytes per token before the codec)."""
        if self.kv_bytes_per_token is not None:
            return "custom", self.kv_bytes_per_token
        geometry = get_model(self.model)
        return geometry.name, geometry.bytes_per_token


@dataclass(frozen=True, slots=True)
class Plan:
    """Every figure of a plan. Key names carry their unit; "total" means the whole fleet."""

    # -- the KV cache
    model: str
    kv_bytes_per_token_uncompressed: int
    codec_ratio: float
    kv_bytes_per_token: float  # stored, after the codec
    context_tokens: int
    session_bytes: float  # context_tokens x kv_bytes_per_token
    # -- capacity
    nodes: int
    drives_per_node: int
    drives_total: int
    raw_tb_per_node: float
    raw_tb_total: float
    erasure: str
    usable_fraction: float
    usable_tb_per_node: float
    usable_tb_total: float
    sessions_per_tb: int  # whole sessions per decimal TB of usable space
    sessions_per_node: int
    sessions_total: int
    # -- density and power
    rack_units_total: float
    tb_per_rack_unit: float  # raw
    psu_watts_total: float
    watts_per_pb: float  # nameplate PSU watts per raw PB
    # -- endurance (drive writes the DWPD rating allows, and the KV stream that makes them)
    drive_bytes_per_kv_byte: float  # write_amplification / usable_fraction
    rated_pbw_per_drive: float
    write_budget_bytes_per_day_per_node: float
    write_budget_bytes_per_day_total: float
    write_budget_pb_per_day_per_node: float
    write_budget_pb_per_day_total: float
    write_budget_gb_s_per_node: float
    write_budget_gb_s_total: float
    write_budget_tokens_s_per_node: float
    write_budget_tokens_s_total: float
    # -- write bandwidth ceiling (drive spec sheet, sequential)
    write_ceiling_gb_s_per_node: float
    write_ceiling_gb_s_total: float
    write_ceiling_tokens_s_per_node: float
    write_ceiling_tokens_s_total: float
    years_to_rating_at_ceiling: float
    # -- at the given write rate (None when no write rate was given)
    write_rate_tokens_s: float | None
    write_rate_gb_s: float | None  # KV bytes (after the codec) arriving at the tier
    drive_write_gb_s: float | None  # what the drives absorb (x drive_bytes_per_kv_byte)
    budget_used_fraction: float | None
    years_to_rating: float | None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(inputs: PlanInputs) -> Plan:
    """Work out every figure of :class:`Plan` from ``inputs`` (formulas: docs/planning.md)."""
    model, bpt_raw = inputs.resolved_bytes_per_token()
    bpt = bpt_raw / inputs.codec_ratio
    session_bytes = inputs.context_tokens * bpt

    drives_total = inputs.drives_per_node * inputs.nodes
    raw_bytes_node = inputs.drives_per_node * inputs.drive_tb * TB
    raw_bytes_total = raw_bytes_node * inputs.nodes

    if inputs.ec_parity and inputs.ec_stripe:
        data = inputs.ec_stripe - inputs.ec_parity
        usable_fraction = data / inputs.ec_stripe
        erasure = f"EC:{inputs.ec_parity}, sets of {data} data + {inputs.ec_parity} parity drives"
    else:
        usable_fraction = 1.0
        erasure = "none, RAID-0-like: usable = raw, no redundancy"
    usable_bytes_node = raw_bytes_node * usable_fraction
    usable_bytes_total = raw_bytes_total * usable_fraction

    drive_per_kv = inputs.write_amplification / usable_fraction

    # endurance: the rating allows dwpd x raw capacity of drive writes per day
    budget_day_node = inputs.dwpd * raw_bytes_node
    budget_day_total = budget_day_node * inputs.nodes
    budget_bps_node = budget_day_node / SECONDS_PER_DAY
    budget_bps_total = budget_day_total / SECONDS_PER_DAY
    rated_bytes_per_drive = inputs.dwpd * inputs.drive_tb * TB * DAYS_PER_YEAR * (
        inputs.warranty_years
    )

    # bandwidth ceiling: every drive writing at its sequential spec
    ceiling_bps_node = inputs.drives_per_node * inputs.drive_write_mbs * MB
    ceiling_bps_total = ceiling_bps_node * inputs.nodes

    def kv_tokens_s(drive_bps: float) -> float:
        return drive_bps / drive_per_kv / bpt

    warnings: list[str] = []
    rate_gb_s = drive_gb_s = used = years = None
    if inputs.write_rate_tokens_s is not None:
        kv_bps = inputs.write_rate_tokens_s * bpt
        drive_bps = kv_bps * drive_per_kv
        rate_gb_s = kv_bps / GB
        drive_gb_s = drive_bps / GB
        used = drive_bps / budget_bps_total
        years = inputs.warranty_years / used
        if drive_bps > ceiling_bps_total:
            warnings.append(
                f"the write rate needs {drive_bps / GB:,.1f} GB/s of drive writes, more than "
                f"the fleet's {ceiling_bps_total / GB:,.1f} GB/s spec-sheet ceiling"
            )
        if years < inputs.warranty_years:
            warnings.append(
                f"at this write rate the DWPD rating is reached in {years:,.2f} years, "
                f"before the {inputs.warranty_years:g}-year warranty ends"
            )
    if session_bytes > usable_bytes_node:
        warnings.append("one session's KV cache is larger than a node's usable capacity")

    result = Plan(
        model=model,
        kv_bytes_per_token_uncompressed=bpt_raw,
        codec_ratio=inputs.codec_ratio,
        kv_bytes_per_token=bpt,
        context_tokens=inputs.context_tokens,
        session_bytes=session_bytes,
        nodes=inputs.nodes,
        drives_per_node=inputs.drives_per_node,
        drives_total=drives_total,
        raw_tb_per_node=raw_bytes_node / TB,
        raw_tb_total=raw_bytes_total / TB,
        erasure=erasure,
        usable_fraction=usable_fraction,
        usable_tb_per_node=usable_bytes_node / TB,
        usable_tb_total=usable_bytes_total / TB,
        sessions_per_tb=_whole(TB / session_bytes),
        sessions_per_node=_whole(usable_bytes_node / session_bytes),
        sessions_total=_whole(usable_bytes_total / session_bytes),
        rack_units_total=inputs.rack_units_per_node * inputs.nodes,
        tb_per_rack_unit=raw_bytes_node / TB / inputs.rack_units_per_node,
        psu_watts_total=inputs.psu_watts_per_node * inputs.nodes,
        watts_per_pb=inputs.psu_watts_per_node / (raw_bytes_node / PB),
        drive_bytes_per_kv_byte=drive_per_kv,
        rated_pbw_per_drive=rated_bytes_per_drive / PB,
        write_budget_bytes_per_day_per_node=budget_day_node,
        write_budget_bytes_per_day_total=budget_day_total,
        write_budget_pb_per_day_per_node=budget_day_node / PB,
        write_budget_pb_per_day_total=budget_day_total / PB,
        write_budget_gb_s_per_node=budget_bps_node / GB,
        write_budget_gb_s_total=budget_bps_total / GB,
        write_budget_tokens_s_per_node=kv_tokens_s(budget_bps_node),
        write_budget_tokens_s_total=kv_tokens_s(budget_bps_total),
        write_ceiling_gb_s_per_node=ceiling_bps_node / GB,
        write_ceiling_gb_s_total=ceiling_bps_total / GB,
        write_ceiling_tokens_s_per_node=kv_tokens_s(ceiling_bps_node),
        write_ceiling_tokens_s_total=kv_tokens_s(ceiling_bps_total),
        years_to_rating_at_ceiling=inputs.warranty_years * budget_bps_total / ceiling_bps_total,
        write_rate_tokens_s=inputs.write_rate_tokens_s,
        write_rate_gb_s=rate_gb_s,
        drive_write_gb_s=drive_gb_s,
        budget_used_fraction=used,
        years_to_rating=years,
        warnings=warnings,
    )
    _finite(result)
    return result


def _finite(result: Plan) -> None:
    """Every figure a number: inputs of absurd magnitude overflow a float to inf (or 0 x inf to
    nan), which no table can show and JSON has no literal for."""
    for name, value in asdict(result).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(
                f"the inputs are too large to work out: {name} comes out as {value} "
                "(check the magnitude of the flags)"
            )


def _whole(x: float) -> int:
    """Whole items that fit, tolerant of float error just below an exact integer."""
    return math.floor(x * (1 + 1e-12))


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a positive number, got {value}")


def _positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value}")
