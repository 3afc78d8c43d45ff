"""``sweep.png``: throughput against clients with whiskers, beside an optional reference."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from warp.sweep.summary import PhaseResult, read_reference

WIDTH_IN, HEIGHT_IN, DPI = 12.0, 5.0, 100  # 1200 x 500 pixels


def plot(phases: Sequence[PhaseResult], path: str | Path, reference: str | Path | None = None,
         title: str = "") -> None:
    big = any(p.fastest_bps >= 2**30 for p in phases if not math.isnan(p.fastest_bps))
    unit, uname = (2**30, "GiB/s") if big else (2**20, "MiB/s")
    fig, (ax, axn) = plt.subplots(1, 2, figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    ref = read_reference(reference) if reference else []
    colors = {"PUT": "tab:red", "GET": "tab:blue"}
    for op in ("PUT", "GET"):
        pts = sorted((p for p in phases if p.op.upper() == op and not math.isnan(p.median_bps)),
                     key=lambda p: p.clients)
        if not pts:
            continue
        xs = [p.clients for p in pts]
        med = [p.median_bps / unit for p in pts]
        lo = [max(0.0, (p.median_bps - p.slowest_bps) / unit) for p in pts]
        hi = [max(0.0, (p.fastest_bps - p.median_bps) / unit) for p in pts]
        ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=4, color=colors[op],
                    label=f"{op} median (whiskers: slowest/fastest 1 s)")
        if med[0] > 0:  # T(1) = T(first n) / first n, as the efficiency column takes it
            axn.plot(xs, [m * xs[0] / med[0] for m in med], marker="o", color=colors[op],
                     label=f"{op} measured")
    if ref:
        rx = [r[0] for r in ref]
        twin = ax.twinx()
        for i, op in ((1, "PUT"), (2, "GET")):
            ry = [r[i] for r in ref]
            twin.plot(rx, ry, linestyle="--", marker="x", color=colors[op], alpha=0.5,
                      label=f"{op} reference (right axis)")
            if ry and ry[0] > 0:
                axn.plot(rx, [y * rx[0] / ry[0] for y in ry], linestyle="--", marker="x",
                         color=colors[op], alpha=0.5, label=f"{op} reference")
        twin.set_ylim(bottom=0)
        twin.set_ylabel(f"reference {Path(reference or '').name} (GiB/s)")
        twin.legend(loc="lower right", fontsize=8)
    xmax = max([p.clients for p in phases] + [r[0] for r in ref] + [1])
    axn.plot([1, xmax], [1, xmax], linestyle=":", color="gray", label="linear")
    ax.set_xlabel("clients")
    ax.set_ylabel(f"throughput ({uname})")
    ax.set_title("Throughput vs clients")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    axn.set_xlabel("clients")
    axn.set_ylabel("T(n) / T(1)")
    axn.set_title("Scaling relative to one client")
    axn.legend(loc="upper left", fontsize=8)
    axn.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
