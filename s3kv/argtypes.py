"""Parsers as argparse ``type=`` callables.

s3kv's parsers (sizes, durations, lists) raise :class:`~s3kv.errors.ConfigError`, which argparse
does not catch while it converts a flag's value: a bad value would end in a traceback instead
of the usage line and the flag's name. :func:`arg_type` turns that error into argparse's own
(exit 2, ``argument --obj-size: invalid size '-1': write bytes ...``).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import SplitResult, urlsplit

from s3kv.errors import ConfigError
from s3kv.wire.headers import is_decimal

T = TypeVar("T")


def arg_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` for ``add_argument(type=...)``: its ConfigError becomes a usage error."""

    @functools.wraps(parse)
    def convert(text: str) -> T:
        try:
            return parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def listen_address(text: str, flag: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; an empty host is every address) as (host, port).

    The gateway's ``--listen`` and the load generator's agent's share this reading.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not is_decimal(port) or not 0 < int(port) < 65536:
        raise ConfigError(f"invalid {flag} {text!r}: write HOST:PORT with a port from 1 to 65535, "
                          "e.g. 127.0.0.1:9470, [::1]:9470 or 0.0.0.0:9470 for every address")
    return host.strip("[]") or "0.0.0.0", int(port)


def http_url(text: str) -> SplitResult | None:
    """``text`` split as an ``http(s)://HOST[:PORT]`` URL; None if it is none (another scheme,
    no host, a port out of 1-65535, or no URL at all: ``http://[::1:1``)."""
    try:
        parts = urlsplit(text)
        port = parts.port  # ValueError: no port number
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        return None
    return parts
