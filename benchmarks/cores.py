"""CPU time of the whole machine, per CPU: what a per-process account cannot see.

A benchmark's per-process CPU-seconds (user + system of the client, the gateway, the server's
daemons) leave out whatever runs outside them: interrupts taken while a CPU was idle, kernel
threads, other processes; and they cannot say whether the CPUs were full. Restoring from Ceph
RGW on these 2-CPU machines (session 43), interrupts (the virtual disk's reads, the loopback's
packets) were 0.3-0.4 CPU-s per GiB, most of them charged to the process they interrupted, what
ran outside the named processes 0.06-0.13, and both CPUs 93-99 % busy: the routes' ratio was
their CPU per GiB apart. :func:`sample` reads the kernel's per-CPU counters (``/proc/stat``
through psutil) and :func:`between` turns two samples into CPU-seconds:

- ``machine``: busy CPU-seconds over every CPU (everything but idle, iowait and time the host
  stole from this VM);
- ``interrupts``: of that, hard and soft interrupts (without ``CONFIG_IRQ_TIME_ACCOUNTING``
  the kernel also charges an interrupt to the process it interrupted, so the per-process
  figures may include some of these);
- ``cpu0``, ``cpu1``, ...: busy CPU-seconds of each CPU (divided by the window's seconds: how
  busy that core was; with ``--split-cores`` one is the storage node's, the other the
  inference node's);
- ``steal``: time the host ran something else on this VM's CPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import psutil

#: names :func:`between` reports besides ``cpu{i}``
TOTALS = ("machine", "interrupts", "steal")


def _seconds(t: Any) -> tuple[float, float, float]:
    """(busy, interrupts, steal) seconds so far of one CPU's psutil ``scputimes``."""
    idle = t.idle + getattr(t, "iowait", 0.0)
    steal = getattr(t, "steal", 0.0)
    interrupts = getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    # on Linux guest time is already inside user: not added again
    total = t.user + t.nice + t.system + idle + interrupts + steal
    return total - idle - steal, interrupts, steal


def sample() -> dict[str, float]:
    """The machine's CPU-seconds so far, by the names :func:`between` reports."""
    out = {"machine": 0.0, "interrupts": 0.0, "steal": 0.0}
    for i, t in enumerate(psutil.cpu_times(percpu=True)):
        busy, interrupts, steal = _seconds(t)
        out[f"cpu{i}"] = busy
        out["machine"] += busy
        out["interrupts"] += interrupts
        out["steal"] += steal
    return out


def between(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU-seconds spent between two :func:`sample` calls, by name."""
    return {k: max(0.0, after[k] - before.get(k, 0.0)) for k in after}


def outside(spent: dict[str, float], names: Iterable[str]) -> float:
    """``other``: the machine's busy CPU-seconds in ``spent`` outside the processes ``names``
    (each named process's CPU-seconds in ``spent`` too)."""
    return max(0.0, spent["machine"] - sum(spent[k] for k in names))


def busy(spent: dict[str, float], seconds: float) -> dict[str, float]:
    """``cpu{i}_busy``: how busy each CPU was over a window of ``seconds`` (0 to 1)."""
    return {f"{k}_busy": round(v / seconds, 3) if seconds else 0.0
            for k, v in spent.items() if k.startswith("cpu") and k[3:].isdigit()}
