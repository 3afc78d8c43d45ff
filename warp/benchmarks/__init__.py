"""Benchmark types: one module each, exposing ``BENCHMARK`` (a Benchmark class) and ``HELP``.

The ``s3kv bench`` command lists the modules it offers in one tuple
(``s3kv.commands.bench.BENCH_TYPES``); another package adds a type by adding its module there.
"""

from __future__ import annotations

import importlib

from s3kv.errors import ConfigError
from warp.benchmarks.base import Benchmark

BUILTIN = ("put", "get", "mixed", "stat", "delete", "list")


def load(name: str) -> Benchmark:
    """A fresh benchmark of the built-in type ``name`` (or a module path with ``BENCHMARK``)."""
    module_name = f"warp.benchmarks.{name}" if name in BUILTIN else name
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise ConfigError(f"unknown benchmark {name!r}: use one of {', '.join(BUILTIN)}") from None
    cls: type[Benchmark] = module.BENCHMARK
    return cls()
