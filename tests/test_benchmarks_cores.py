"""benchmarks/cores.py: the machine's CPU time per CPU, what per-process accounts leave out."""

from __future__ import annotations

import os
import time

import psutil

from benchmarks import cores
from benchmarks.harness import CPUMeter


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_sample_names_every_cpu_and_the_totals() -> None:
    got = cores.sample()
    cpus = [f"cpu{i}" for i in range(psutil.cpu_count())]
    assert set(got) == {*cores.TOTALS, *cpus}
    assert all(v >= 0 for v in got.values())
    assert abs(got["machine"] - sum(got[c] for c in cpus)) < 1e-6


def test_between_counts_this_process_s_own_work() -> None:
    """A busy loop of 0.3 CPU-s in this process shows in the machine's busy time (to a tick
    per CPU: psutil counts 10 ms ticks), and on some CPU."""
    me = psutil.Process()
    before, own0 = cores.sample(), sum(me.cpu_times()[:2])
    _spin(0.3)
    spent, own = cores.between(before, cores.sample()), sum(me.cpu_times()[:2]) - own0
    assert own >= 0.25
    assert spent["machine"] >= own - 0.01 * (psutil.cpu_count() + 1)
    assert max(spent[f"cpu{i}"] for i in range(psutil.cpu_count())) > 0
    assert all(v >= 0 for v in spent.values())


def test_busy_is_each_cpu_s_share_of_the_window() -> None:
    spent = {"cpu0": 0.5, "cpu1": 1.0, "machine": 1.5, "interrupts": 0.25, "steal": 0.0}
    assert cores.busy(spent, 1.0) == {"cpu0_busy": 0.5, "cpu1_busy": 1.0}
    assert cores.busy(spent, 0.0) == {"cpu0_busy": 0.0, "cpu1_busy": 0.0}


def test_meter_for_a_run_adds_the_machine_and_what_ran_outside() -> None:
    meter = CPUMeter({"client": os.getpid()}, (), machine=True)
    before = meter.sample()
    assert {"client", *cores.TOTALS, "cpu0"} <= set(before)
    _spin(0.1)
    d = meter.delta(before, meter.sample())
    assert d["other"] >= 0 and d["machine"] >= d["client"] - 0.01 * (psutil.cpu_count() + 1)
    bare = CPUMeter({"client": os.getpid()}, ())  # without: the named processes only
    assert set(bare.sample()) == {"client"}
    assert "other" not in bare.delta(bare.sample(), bare.sample())
