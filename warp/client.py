"""``python -m warp.client JOB.json``: one benchmark client process of a sweep.

The job file holds ``{"config": BenchConfig, "records": PATH, "start_at": WALL_S,
"comment": TEXT}``. The process prepares, waits for ``start_at`` (so all clients of a phase,
local or remote, start together), runs, and prints one JSON line of running totals every
half second on stdout, then a last line with ``"done": true``. Exit status: 0, 1 when
operations failed, 130 when interrupted (records are kept in every case).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warp.benchmarks import load
from warp.config import BenchConfig
from warp.runner import LiveStats, run_client


@dataclass(frozen=True)
class Job:
    config: BenchConfig
    records: str
    start_at: float = 0.0
    comment: str = ""

    def to_json(self) -> str:
        return json.dumps({"config": self.config.to_dict(), "records": self.records,
                           "start_at": self.start_at, "comment": self.comment})

    @classmethod
    def from_json(cls, text: str) -> Job:
        data: dict[str, Any] = json.loads(text)
        return cls(BenchConfig.from_dict(data["config"]), str(data["records"]),
                   float(data.get("start_at", 0.0)), str(data.get("comment", "")))


def _emit(stats: LiveStats, elapsed: float, **extra: Any) -> None:
    line = {"ops": stats.ops, "bytes": stats.bytes, "errors": stats.errors,
            "verify_failures": stats.verify_failures, "elapsed": round(elapsed, 3)} | extra
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def run_job(job: Job) -> int:
    result = await run_client(job.config, load(job.config.op), Path(job.records),
                              start_at=job.start_at, progress=_emit, comment=job.comment)
    _emit(result.stats, (result.ended_ns - result.started_ns) / 1e9, done=True,
          interrupted=result.interrupted)
    if result.interrupted:
        return 130
    return 1 if result.stats.errors else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m warp.client JOB.json", file=sys.stderr)
        return 2
    job = Job.from_json(Path(args[0]).read_text())
    try:
        return asyncio.run(run_job(job))
    except KeyboardInterrupt:  # before the run's own handler was installed
        return 130


if __name__ == "__main__":
    sys.exit(main())
