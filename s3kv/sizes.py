"""Byte sizes as people write them: ``256MiB``, ``16MiB``, ``1GiB``, ``4KiB`` or plain bytes."""

from __future__ import annotations

import re

from s3kv.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": KiB,
    "kib": KiB,
    "mi": MiB,
    "mib": MiB,
    "gi": GiB,
    "gib": GiB,
    "ti": TiB,
    "tib": TiB,
}

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Parse ``"256MiB"``, ``"16 MiB"``, ``"1GiB"``, ``"1.5GiB"``, ``"4096"`` into bytes.

    Binary units (KiB, MiB, GiB, TiB) are powers of 1024; decimal ones (KB, MB, GB, TB) powers
    of 1000. Raises ConfigError with the accepted forms on anything else.
    """
    if isinstance(text, int):
        if text < 0:
            raise ConfigError(f"size must not be negative: {text}")
        return text
    m = _SIZE_RE.match(text)
    if not m:
        raise ConfigError(
            f"invalid size {text!r}: write bytes (4096) or a number with a unit "
            "(4KiB, 16MiB, 256MiB, 1GiB, 10GB)"
        )
    number, unit = m.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise ConfigError(f"invalid size unit {unit!r} in {text!r}: use KiB, MiB, GiB, TiB "
                          "or KB, MB, GB, TB")
    value = float(number) * factor
    if value != int(value):
        raise ConfigError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def format_size(n: float) -> str:
    """Render bytes with the largest binary unit that keeps the number >= 1: ``256MiB``."""
    for unit, factor in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= factor:
            value = n / factor
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.2f}{unit}"
    return f"{int(n)}B"
