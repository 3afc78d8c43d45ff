"""Helpers for the load generator's tests: small, fast benchmark configs on the moto server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from warp.benchmarks import load
from warp.config import BenchConfig
from warp.runner import RunResult, run_client


def small_config(endpoint: str, bucket: str, op: str, **kw: Any) -> BenchConfig:
    base: dict[str, Any] = dict(obj_size=32 * 1024, concurrent=2, duration=1.0, objects=12,
                                batch=5, part_size=5 * 1024 * 1024)
    base.update(kw)
    return BenchConfig(op=op, endpoints=(endpoint,), bucket=bucket, **base)


def run(config: BenchConfig, records: Path) -> RunResult:
    return asyncio.run(run_client(config, load(config.op), records, handle_sigint=False))
