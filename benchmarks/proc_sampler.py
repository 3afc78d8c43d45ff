"""CPU-seconds of named processes over a time window that a client reports afterwards.

A load generator (``s3kv bench``, benchmarks/ceiling_native.py) says when its timed operations
began and ended (wall-clock ns, s3kv/clock.py) only once it exits, after its start-up and any
preparation. :class:`Sampler` therefore samples every named process's user+system CPU-seconds
(all threads, psutil) on a background thread while the client runs, and
:meth:`Sampler.cpu_between` interpolates each process's samples at the window's ends, so start-up,
preparation and shutdown are not counted on either side.

A process named in ``loops`` also gets a series of its main thread alone (``NAME_loop``): the
gateway's event loop, apart from its worker threads (file writes, checksums of large blocks,
page population).

Peak RSS: :func:`reset_peak_rss` and :func:`peak_rss` use Linux's ``VmHWM`` (exact, reset by
``clear_refs``); elsewhere the sampler's own largest RSS seen stands in. RSS counts the pages
of files a process maps: a gateway on a ``file://`` store in tmpfs maps its segment files, so
its RSS includes store pages that exist whether mapped or not. ``max_anon`` is the largest
``RssAnon`` sampled (Linux): the process's own memory (heap, buffers), apart from those.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from types import TracebackType

import psutil

#: seconds between samples (a 10 s window is then read to within about 1 %)
PERIOD = 0.05


class Sampler:
    """Samples ``procs`` (name -> pid) every ``period`` seconds until closed."""

    def __init__(self, procs: Mapping[str, int], period: float = PERIOD,
                 loops: Collection[str] = ()) -> None:
        """``loops``: names of ``procs`` whose main thread is also sampled on its own."""
        self.period = period
        self._procs = {name: psutil.Process(pid) for name, pid in procs.items()}
        self._loops = {name: procs[name] for name in loops}
        self._series: dict[str, tuple[list[int], list[float]]] = {
            n: ([], []) for n in [*procs, *(f"{name}_loop" for name in loops)]}
        self.max_rss: dict[str, int] = dict.fromkeys(procs, 0)
        #: the largest RssAnon seen per process (0 where the system does not say)
        self.max_anon: dict[str, int] = dict.fromkeys(procs, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="proc-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def sample(self) -> None:
        for name, proc in self._procs.items():
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    rss = proc.memory_info().rss
            except psutil.Error:  # exited: its last samples stand
                continue
            now = time.time_ns()
            stamps, values = self._series[name]
            stamps.append(now)
            values.append(t.user + t.system)
            self.max_rss[name] = max(self.max_rss[name], rss)
            self.max_anon[name] = max(self.max_anon[name], anon_rss(proc.pid))
            if name in self._loops:
                self._sample_loop(name, proc, now)

    def _sample_loop(self, name: str, proc: psutil.Process, now: int) -> None:
        try:
            main = next((t for t in proc.threads() if t.id == self._loops[name]), None)
        except psutil.Error:
            return
        if main is not None:
            stamps, values = self._series[f"{name}_loop"]
            stamps.append(now)
            values.append(main.user_time + main.system_time)

    def cpu_between(self, start_ns: int, end_ns: int) -> dict[str, float]:
        """CPU-seconds each process used from ``start_ns`` to ``end_ns`` (wall clock)."""
        return {name: max(0.0, _at(series, end_ns) - _at(series, start_ns))
                for name, series in self._series.items()}


def _at(series: tuple[list[int], list[float]], t_ns: int) -> float:
    """The CPU-seconds counter at ``t_ns``, linear between the samples around it (the first
    or last sample outside them)."""
    stamps, values = series
    if not stamps:
        return 0.0
    i = bisect.bisect_left(stamps, t_ns)
    if i == 0:
        return values[0]
    if i == len(stamps):
        return values[-1]
    t0, t1, v0, v1 = stamps[i - 1], stamps[i], values[i - 1], values[i]
    return v0 + (v1 - v0) * (t_ns - t0) / (t1 - t0) if t1 > t0 else v1


def anon_rss(pid: int) -> int:
    """The process's resident anonymous memory in bytes (Linux ``RssAnon``; 0 elsewhere)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss(pid: int) -> bool:
    """Reset the process's peak RSS (Linux ``VmHWM``); whether that was possible."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss(pid: int) -> int | None:
    """The process's peak RSS in bytes since start or the last reset (None: not on Linux)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None
