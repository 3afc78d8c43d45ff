"""Shared pieces of the reliability suite: the short/long switch and the report of what held.

Every test records what it tried and what held (faults injected, requests sent, wrong bytes
returned, acknowledged-durable blocks lost, peak memory). ``--reliability-report PATH`` writes
the table as Markdown (PATH) and the raw counts as JSON (PATH with ``.json``), which is how
docs/reliability.md is produced:

    python -m pytest tests/reliability --long --reliability-report docs/reliability-table.md
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest


@dataclass
class Row:
    suite: str  # crash, backend-faults, disk, load, fuzz, security
    check: str  # what was tried, in a few words
    faults: int = 0  # faults injected (kills, outages, corruptions, malformed requests...)
    requests: int = 0  # requests sent
    wrong_bytes: int = 0  # responses whose bytes differed from what was written (must be 0)
    durable_lost: int = 0  # acknowledged-durable blocks not read back (must be 0)
    peak_rss_mib: float = 0.0  # peak RSS of the gateway process
    held: bool = True
    note: str = ""


@dataclass
class Report:
    long: bool
    rows: list[Row] = field(default_factory=list)

    def record(self, suite: str, check: str, **counts: object) -> Row:
        row = Row(suite, check, **counts)  # type: ignore[arg-type]
        self.rows.append(row)
        return row

    def markdown(self) -> str:
        head = ("| suite | check | faults injected | requests | wrong bytes | durable lost "
                "| peak RSS MiB | held |\n|---|---|---:|---:|---:|---:|---:|---|")
        lines = [head]
        for r in self.rows:
            lines.append(f"| {r.suite} | {r.check} | {r.faults} | {r.requests} | "
                         f"{r.wrong_bytes} | {r.durable_lost} | {r.peak_rss_mib:.0f} | "
                         f"{'yes' if r.held else 'NO: ' + r.note} |")
        total = Row("total", "", sum(r.faults for r in self.rows),
                    sum(r.requests for r in self.rows), sum(r.wrong_bytes for r in self.rows),
                    sum(r.durable_lost for r in self.rows),
                    max((r.peak_rss_mib for r in self.rows), default=0.0),
                    all(r.held for r in self.rows))
        lines.append(f"| **total** | {len(self.rows)} checks | {total.faults} | "
                     f"{total.requests} | {total.wrong_bytes} | {total.durable_lost} | "
                     f"{total.peak_rss_mib:.0f} | {'yes' if total.held else 'NO'} |")
        return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def reliability_report(request: pytest.FixtureRequest, long_run: bool) -> Iterator[Report]:
    if request.config.getoption("--reliability-report") and os.environ.get("PYTEST_XDIST_WORKER"):
        raise pytest.UsageError("--reliability-report collects every test's row in one "
                                "process: run it without -n")
    report = Report(long_run)
    yield report
    target = request.config.getoption("--reliability-report")
    if target and report.rows:
        path = Path(target)
        path.write_text(report.markdown())
        path.with_suffix(".json").write_text(json.dumps(
            {"long": report.long, "rows": [asdict(r) for r in report.rows]}, indent=2))
