"""``python -m warp.client``: one benchmark client process of a sweep, serving jobs on stdin.

A sweep keeps one such process per client slot for all its phases (process start-up is paid
once, not per phase). Protocol, one JSON object per line:

- stdin ``{"job": {"config": BenchConfig, "records": PATH, "comment": TEXT}}``: set up (bucket),
  then stdout ``{"ready": true}``;
- stdin ``{"start_at": WALL_S}``: start then (every client of a phase gets the same time);
  stdout a line of running totals every half second, then ``{"done": true, "exit": N}``
  (0, 1 when operations failed, 130 when interrupted: the records are kept in every case);
- end of stdin: exit.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s3kv.errors import S3KVError
from warp.benchmarks import load
from warp.config import BenchConfig
from warp.recorder import LiveStats
from warp.runner import run_client


@dataclass(frozen=True)
class Job:
    config: BenchConfig
    records: str
    comment: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "records": self.records,
                "comment": self.comment}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        return cls(BenchConfig.from_dict(data["config"]), str(data["records"]),
                   str(data.get("comment", "")))


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _progress(stats: LiveStats, elapsed: float) -> None:
    _emit({"ops": stats.ops, "bytes": stats.bytes, "errors": stats.errors,
           "verify_failures": stats.verify_failures, "elapsed": round(elapsed, 3)})


async def _readline() -> dict[str, Any] | None:
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if not line:
        return None
    data: dict[str, Any] = json.loads(line)
    return data


async def run_job(job: Job) -> int:
    async def gate() -> float:
        _emit({"ready": True})
        msg = await _readline()
        return float(msg.get("start_at", 0.0)) if msg else 0.0

    try:
        result = await run_client(job.config, load(job.config.op), Path(job.records),
                                  start_gate=gate, progress=_progress, comment=job.comment)
    except S3KVError as exc:  # cannot run (bucket, credentials): tell the coordinator
        _emit({"error": str(exc), "done": True, "exit": 2})
        return 2
    code = 130 if result.interrupted else (1 if result.stats.errors else 0)
    _emit({"ops": result.stats.ops, "bytes": result.stats.bytes, "errors": result.stats.errors,
           "verify_failures": result.stats.verify_failures, "done": True, "exit": code})
    return code


async def serve() -> int:
    while (msg := await _readline()) is not None:
        if "job" in msg and await run_job(Job.from_dict(msg["job"])) == 130:
            return 130
    return 0


def main() -> int:
    try:
        return asyncio.run(serve())
    except KeyboardInterrupt:  # Ctrl-C while idle between jobs
        return 130


if __name__ == "__main__":
    sys.exit(main())
