"""What a benchmark client records: each completed operation as a record, and live totals
(for progress bars and ``--autoterm``). The benchmarks record through a :class:`Recorder`; the
runner creates it and reads its totals."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from s3kv.clock import now_s
from warp.config import BenchConfig
from warp.opresult import OpResult
from warp.records import Record, RecordWriter


@dataclass
class LiveStats:
    """Running totals, for progress bars and ``--autoterm``."""

    ops: int = 0
    bytes: int = 0
    errors: int = 0
    verify_failures: int = 0
    #: completed bytes (or ops, when ops move no bytes) per wall-clock second
    per_second: dict[int, float] = field(default_factory=dict)

    def stable(self, seconds: float, pct: float, since_s: float) -> bool:
        """Warp-like autoterm: the last ``seconds`` full seconds all within ``pct`` % of their
        mean (and the run has gone on for at least that long)."""
        n = max(2, math.ceil(seconds))
        current = int(now_s())
        window = [self.per_second.get(s, 0.0) for s in range(current - n, current)]
        if current - n < since_s:
            return False
        mean = statistics.fmean(window)
        return mean > 0 and all(abs(v - mean) <= mean * pct / 100 for v in window)


class Recorder:
    """Turns results into records, writes them as they come and keeps live totals."""

    def __init__(self, config: BenchConfig, writer: RecordWriter | None) -> None:
        self.config = config
        self.writer = writer
        self.stats = LiveStats()
        self.recording = False  # prepare-phase operations are not recorded, as in Warp

    def add(self, op: str, thread: int, key: str, r: OpResult, n_objects: int = 1) -> None:
        if not self.recording:
            return
        rec = Record(op=op, thread=thread, client_id=self.config.client_id, endpoint=r.endpoint,
                     file=key, size=r.size, start_ns=r.start_ns, end_ns=r.end_ns,
                     first_byte_ns=r.first_byte_ns if op in ("GET", "LIST") else 0,
                     error=r.error, http_status=r.status, retries=r.retries, n_objects=n_objects)
        if self.writer is not None:
            self.writer.write(rec)
        s = self.stats
        s.ops += 1
        if rec.ok:
            s.bytes += rec.size
            sec = rec.end_ns // 1_000_000_000
            s.per_second[sec] = s.per_second.get(sec, 0.0) + (rec.size or n_objects)
        else:
            s.errors += 1
            s.verify_failures += rec.verify_failed
