"""Wall-clock nanoseconds with monotonic resolution, comparable across client processes.

The wall clock is read once per process and advanced by the monotonic clock, so records are
never disturbed by clock steps during a run, while processes (and NTP-synced hosts) still share
one time base for analysis.
"""

from __future__ import annotations

import time

_WALL0 = time.time_ns()
_MONO0 = time.perf_counter_ns()


def now_ns() -> int:
    return _WALL0 + (time.perf_counter_ns() - _MONO0)


def now_s() -> float:
    return now_ns() / 1e9
