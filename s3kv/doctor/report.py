"""What `s3kv doctor` reports: the statuses, one check's outcome, the target checked, the
report (text and JSON), and the runner that times checks and collects them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""
    seconds: float = 0.0


@dataclass
class Target:
    """What to check: endpoints (the first one carries the S3 checks), bucket, prefix, keys."""

    endpoints: list[str]
    bucket: str
    prefix: str = ""
    region: str = "us-east-1"
    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    session_token: str = field(default="", repr=False)
    credentials_from: str = ""
    timeout: float = 5.0
    max_skew: float = 60.0
    verify_tls: bool = True


@dataclass
class Report:
    target: Target
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "endpoints": self.target.endpoints,
            "bucket": self.target.bucket,
            "prefix": self.target.prefix,
            "region": self.target.region,
            "credentials_from": self.target.credentials_from,
            "checks": [asdict(c) for c in self.checks],
        }

    def to_text(self) -> str:
        t = self.target
        lines = [f"s3kv doctor: {', '.join(t.endpoints)}  bucket {t.bucket}"
                 + (f"  prefix {t.prefix}" if t.prefix else "")]
        for c in self.checks:
            lines.append(f"  {c.status:<5} {c.name:<12} {c.detail}")
            if c.fix and c.status != OK:
                lines.append(f"  {'':<5} {'':<12} fix: {c.fix}")
        counts = {s: sum(1 for c in self.checks if c.status == s) for s in (OK, WARN, FAIL, SKIP)}
        lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n)
                     + ("" if self.ok else "  -> not ready for s3kv"))
        return "\n".join(lines)




class Runner:
    def __init__(self) -> None:
        self.checks: list[Check] = []

    @contextmanager
    def check(self, name: str) -> Iterator[Check]:
        chk = Check(name, OK, "")
        start = time.perf_counter()
        try:
            yield chk
        finally:
            chk.seconds = round(time.perf_counter() - start, 4)
            self.checks.append(chk)

    def skip(self, name: str, why: str) -> None:
        self.checks.append(Check(name, SKIP, why))

    def passed(self, name: str) -> bool:
        return any(c.name == name and c.status in (OK, WARN) for c in self.checks)

