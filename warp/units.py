"""Parsing and formatting of the units benchmark flags use: durations, client ranges, rates."""

from __future__ import annotations

import re

from s3kv.errors import ConfigError
from s3kv.sizes import GiB, MiB
from s3kv.wire.headers import is_decimal

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str | float) -> float:
    """Parse ``"5m"``, ``"30s"``, ``"1.5s"``, ``"250ms"``, ``"1h"`` or plain seconds."""
    if isinstance(text, (int, float)):
        if text < 0:
            raise ConfigError(f"duration must not be negative: {text}")
        return float(text)
    m = _DURATION_RE.match(text)
    if not m:
        raise ConfigError(f"invalid duration {text!r}: write seconds (30) or 250ms, 30s, 5m, 1h")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


def parse_client_range(text: str) -> list[int]:
    """Parse ``"1..8"``, ``"1,2,4,8"``, ``"3"`` or ``"1..8:2"`` (step) into client counts."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)\.\.(\d+)(?::(\d+))?", part, re.ASCII)
        if m:
            lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
            if lo < 1 or hi < lo or step < 1:
                raise ConfigError(f"invalid client range {part!r}: write LO..HI with 1 <= LO <= HI")
            out.extend(range(lo, hi + 1, step))
        elif is_decimal(part) and int(part) >= 1:
            out.append(int(part))
        else:
            raise ConfigError(f"invalid client count {part!r}: write 1..8, 1,2,4 or 3")
    return sorted(set(out))


def gib_s(bytes_per_s: float) -> float:
    return bytes_per_s / GiB


def format_rate(bytes_per_s: float) -> str:
    """A throughput the way Warp prints it (MiB/s below 10 GiB/s, GiB/s above)."""
    if bytes_per_s >= 10 * GiB:
        return f"{bytes_per_s / GiB:.2f} GiB/s"
    return f"{bytes_per_s / MiB:.1f} MiB/s"
