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

from s3kv.errors import ConfigError

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
