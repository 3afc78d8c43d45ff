"""Index memory of benchmarks/packing.py: RSS growth of a fresh process holding a
BlockIndex of N entries with 64-byte keys (keys included)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.packing_runs import (
    Progress,
)

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
