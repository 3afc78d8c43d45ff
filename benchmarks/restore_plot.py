"""The restore against the block's size, as a PNG, from ``benchmarks/gateway.py --json`` run with
several ``--restore-block-tokens``: left, the restore ratio (per-block GETs' time over the batch
restore's) against the block's size, with issue 16's target; right, the S3 server's CPU-seconds
per restore on each side. The per-block side pays the server a cost per request on top of one
per byte, the batch restore about the per-byte cost alone, so the ratio falls as blocks grow.

    python benchmarks/gateway.py --server rgw --split-cores --client warp --etag fast \\
        --part-size 64MiB --repeats 3 --volume 8MiB --restore-block-tokens 16,4,8,32,64 \\
        --json > restore.json
    python benchmarks/restore_plot.py restore.json restore.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

#: issue 16's restore target (benchmarks/gateway.py TARGETS["restore_ratio"])
TARGET = 2.5
WIDTH_IN, HEIGHT_IN, DPI = 12.0, 5.0, 100  # 1200 x 500 pixels


def points(doc: dict[str, Any]) -> list[dict[str, float]]:
    """One point per block size, smallest first: tokens, KiB, ratio and both sides' server
    CPU-seconds. Raises ValueError for a report without per-size restore figures."""
    sizes = doc.get("restore_block_tokens")
    if not sizes:
        raise ValueError("no restore_block_tokens in this report: run benchmarks/gateway.py "
                         "with --restore-block-tokens and --json")
    out = []
    for t in sizes:
        out.append({"tokens": t, "kib": doc[f"restore_block_bytes_{t}tok"] / 1024,
                    "ratio": doc[f"restore_ratio_{t}tok"],
                    "batch_cpu": doc[f"restore_batch_server_cpu_s_{t}tok"],
                    "per_block_cpu": doc[f"restore_per_block_server_cpu_s_{t}tok"]})
    return sorted(out, key=lambda p: p["kib"])


def plot(doc: dict[str, Any], path: str | Path) -> None:
    pts = points(doc)
    kib = [p["kib"] for p in pts]
    fig, (ax, axc) = plt.subplots(1, 2, figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    ax.plot(kib, [p["ratio"] for p in pts], marker="o", color="tab:blue",
            label="restore ratio (per-block GETs' time / batch restore's)")
    ax.axhline(TARGET, linestyle="--", color="tab:red", label=f"issue 16's target ({TARGET})")
    ax.axhline(1.0, linestyle=":", color="gray")
    for p in pts:
        ax.annotate(f"{p['tokens']} tok", (p["kib"], p["ratio"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    axc.plot(kib, [p["per_block_cpu"] for p in pts], marker="o", color="tab:orange",
             label="per-block GETs")
    axc.plot(kib, [p["batch_cpu"] for p in pts], marker="o", color="tab:green",
             label="batch restore")
    for a in (ax, axc):
        a.set_xscale("log", base=2)
        a.set_xticks(kib, [f"{k:.0f}" for k in kib])
        a.minorticks_off()
        a.set_xlabel("block size (KiB)")
        a.set_ylim(bottom=0)
        a.grid(alpha=0.3)
        a.legend(loc="upper right", fontsize=8)
    ax.set_ylabel("ratio")
    ax.set_title(f"Restore of {doc.get('model', '')} session vs block size")
    axc.set_ylabel("S3 server CPU-s per restore")
    axc.set_title(f"Server CPU ({doc.get('server', '')}; split cores: "
                  f"{doc.get('split_cores', '?')})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="benchmarks/gateway.py's JSON report")
    parser.add_argument("png", help="where to write the plot")
    args = parser.parse_args(argv)
    try:
        doc = json.loads(Path(args.report).read_text())
        plot(doc, args.png)
    except (OSError, ValueError, KeyError) as exc:
        print(f"restore_plot: {args.report}: {exc!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
