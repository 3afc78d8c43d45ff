"""The rest of benchmarks/packing.py: the index's memory per entry (measured in a fresh
subprocess) and the report (targets, JSON, text table)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchServer, Progress
from benchmarks.packing_runs import Profile, size_label

# ---- index memory ----------------------------------------------------------------------------
#: key length of the measurement (the issue's 64-byte keys)
KEY_BYTES = 64

_INDEX_CHILD = r"""
import gc, hashlib, json, sys
from s3kv.store.index import BlockIndex, Location

def rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")

n, klen = int(sys.argv[1]), int(sys.argv[2])
def key(i):
    return hashlib.blake2b(i.to_bytes(8, "little"), digest_size=klen // 2).hexdigest().encode()
gc.collect()
idx = BlockIndex()
before = rss()
for i in range(n):
    idx.put(1, key(i), Location(1 + i // 1000, (i % 1000) * 262144, 262144, 262144,
                                i & 0xFFFFFFFF, 0, 1.7e9 + i))
gc.collect()
after = rss()
assert len(idx) == n and idx.get(1, key(n // 2)).crc == (n // 2) & 0xFFFFFFFF
print(json.dumps({"rss_delta": after - before, "entries": n, "key_bytes": len(key(0)),
                  "array_bytes": idx.memory_bytes()}))
"""


def index_phase(entries: int, progress: Progress) -> dict[str, Any]:
    progress(f"index: {entries:,} entries with {KEY_BYTES}-byte keys in a fresh subprocess")
    out = subprocess.run([sys.executable, "-c", _INDEX_CHILD, str(entries), str(KEY_BYTES)],
                         capture_output=True, text=True, check=False, timeout=900,
                         cwd=str(Path(__file__).resolve().parent.parent))
    if out.returncode != 0:
        raise RuntimeError(f"index subprocess failed:\n{out.stderr[-2000:]}")
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    res["bytes_per_entry"] = res["rss_delta"] / entries
    res["array_bytes_per_entry"] = res["array_bytes"] / entries
    progress(f"index: {res['bytes_per_entry']:.1f} B/entry RSS delta "
             f"({res['array_bytes_per_entry']:.1f} B/entry in its arrays)")
    return res


# ---- the report ------------------------------------------------------------------------------
TARGETS = {  # issue 2; reported, never asserted
    "put_ratio_256KiB": (">=", 2.0),
    "put_ratio_2MiB": (">=", 1.0),
    "chain_read_ratio": (">=", 2.0),
    "index_bytes_per_entry": ("<=", 160.0),
    "write_amplification": ("<=", 1.02),
}


def build_report(server: BenchServer, profile: Profile, repeats: int,
                 measured: dict[str, Any], index: dict[str, Any],
                 elapsed: float) -> dict[str, Any]:
    comps: dict[str, Any] = measured["comparisons"]
    small = size_label(profile.block_sizes[0])
    large = size_label(profile.block_sizes[-1])
    was = [s["write_amplification"] for s in measured["store"][small]]
    out: dict[str, Any] = {
        "put_ratio_256KiB": comps[f"put_{small}"]["ratio"],
        "put_ratio_2MiB": comps[f"put_{large}"]["ratio"],
        "chain_read_ratio": comps["chain_read"]["ratio"],
        "index_bytes_per_entry": index["bytes_per_entry"],
        "write_amplification": statistics.median(was),
        "get_ratio_256KiB": comps[f"get_{small}"]["ratio"],
        "get_ratio_2MiB": comps[f"get_{large}"]["ratio"],
        "multipart_ceiling_mib_s": measured["multipart_ceiling"]["mib_s"],
        "store_put_256KiB_vs_ceiling": (comps[f"put_{small}"]["store_mib_s"]
                                        / measured["multipart_ceiling"]["mib_s"]),
        "store_put_2MiB_vs_ceiling": (comps[f"put_{large}"]["store_mib_s"]
                                      / measured["multipart_ceiling"]["mib_s"]),
        "server": server.name,
        "endpoint": server.url,
        "repeats": repeats,
        "profile": {**asdict(profile),
                    "segment_size_h": size_label(profile.segment_size),
                    "part_size_h": size_label(profile.part_size),
                    "volume_h": size_label(profile.volume)},
        "comparisons": comps,
        "store": measured["store"],
        "chain": measured["chain"],
        "multipart_ceiling": measured["multipart_ceiling"],
        "index": index,
        "targets": {k: f"{op} {v:g}" for k, (op, v) in TARGETS.items()},
        "elapsed_s": round(elapsed, 1),
    }
    for key in (*TARGETS, "get_ratio_256KiB", "get_ratio_2MiB", "store_put_256KiB_vs_ceiling",
                "store_put_2MiB_vs_ceiling"):
        out[key] = round(float(out[key]), 4)
    return out


def meets(key: str, value: float) -> str:
    op, target = TARGETS[key]
    ok = value >= target if op == ">=" else value <= target
    return f"{op} {target:g}  {'ok' if ok else 'MISSED'}"


def _cpu_note(comp: dict[str, Any]) -> str:
    """Server CPU s/GiB of the best store and direct runs of the median repeat."""
    reps = comp["repeats"]
    rep = sorted(reps, key=lambda c: c["ratio"])[len(reps) // 2]
    s = rep["runs"][f"store_c{rep['store_best_concurrency']}"]["server_cpu_s_per_gib"]
    d = rep["runs"][f"direct_c{rep['direct_best_concurrency']}"]["server_cpu_s_per_gib"]
    return "" if s is None or d is None else f"{s:>7.1f} /{d:>5.1f}"


def render_text(report: dict[str, Any]) -> str:
    p = report["profile"]
    reps = report["repeats"]
    lines = [
        f"s3kv block store packing benchmark - server {report['server']} at "
        f"{report['endpoint']}",
        f"segments {p['segment_size_h']}, parts {p['part_size_h']}, {p['volume_h']} of blocks "
        f"per timed PUT run, concurrency {'/'.join(map(str, p['concurrency']))} (the better "
        f"counts on each side), chains {p['chains']} x {p['chain_length']} blocks"
        + (f"; median of {reps} repeats" if reps > 1 else ""),
        "",
        f"{'':27}{'store MiB/s':>12}{'direct MiB/s':>13}{'ratio':>8}  {'server CPU s/GiB':>16}"
        f"  target",
        f"{'':27}{'':>12}{'':>13}{'':>8}  {'store / direct':>16}",
    ]
    rows = [("put_256KiB", "PUT 256 KiB (incl. flush)", "put_ratio_256KiB"),
            ("get_256KiB", "GET 256 KiB", None),
            ("put_2MiB", "PUT 2 MiB (incl. flush)", "put_ratio_2MiB"),
            ("get_2MiB", "GET 2 MiB", None),
            ("chain_read", f"chain read {p['chain_length']} x 256 KiB", "chain_read_ratio")]
    for comp_key, title, target_key in rows:
        c = report["comparisons"].get(comp_key)
        if c is None:
            continue
        target = meets(target_key, report[target_key]) if target_key else ""
        lines.append(f"{title:27}{c['store_mib_s']:>12.1f}{c['direct_mib_s']:>13.1f}"
                     f"{c['ratio']:>8.2f}  {_cpu_note(c):>16}  {target}")
        if reps > 1:
            lines.append(f"{'':27}ratios per repeat: {', '.join(map(str, c['ratios']))}")
    idx = report["index"]
    ceiling = report["multipart_ceiling"]
    cpu = ceiling["repeats"][0]["server_cpu_s_per_gib"]
    how = ("one PUT each" if p["part_size"] == p["segment_size"]
           else f"{p['part_size_h']} parts")
    lines += [
        "",
        f"segment-write ceiling      {ceiling['mib_s']:8.1f} MiB/s   ({p['segment_size_h']} objects"
        f" in {how}, no store"
        + (f"; server CPU {cpu} s/GiB" if cpu is not None else "") + "); store PUT reaches "
        f"{report['store_put_256KiB_vs_ceiling']:.2f} (256 KiB) and "
        f"{report['store_put_2MiB_vs_ceiling']:.2f} (2 MiB) of it",
        f"index bytes per entry      {report['index_bytes_per_entry']:8.1f}   "
        f"({idx['entries']:,} entries, {idx['key_bytes']}-byte keys, RSS delta; "
        f"{idx['array_bytes_per_entry']:.1f} in its arrays)   "
        f"{meets('index_bytes_per_entry', report['index_bytes_per_entry'])}",
        f"write amplification        {report['write_amplification']:8.4f}   "
        f"(256 KiB blocks, backend bytes / block bytes after flush)   "
        f"{meets('write_amplification', report['write_amplification'])}",
        f"elapsed {report['elapsed_s']} s",
    ]
    return "\n".join(lines)
