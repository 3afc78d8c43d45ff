"""Freed memory is kept for reuse (s3kv/gateway/heap.py): buffers freed by one segment are the
next segment's, not new pages the kernel faults in and zeroes. Runs in a subprocess: mallopt
changes the whole process."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                                reason="mallopt is glibc's; other C libraries are left as is")

CHILD = r"""
import json, os, resource, sys
from s3kv.gateway.heap import keep_freed_memory

tuned = keep_freed_memory(1 << 30) if sys.argv[1] == "tuned" else None
src = os.urandom(256 * 1024 - 1)

def faults_per_buffer():
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    held = [src + b"x" for _ in range(512)]  # 128 MiB of fresh 256 KiB buffers, like a segment
    f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    del held  # the segment is uploaded: all of it freed at once
    return (f1 - f0) / 512

rounds = [faults_per_buffer() for _ in range(4)]
print(json.dumps({"tuned": tuned, "rounds": rounds}))
"""


def run(mode: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True,
                         check=True, timeout=120)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_freed_buffers_are_reused_without_page_faults() -> None:
    tuned = run("tuned")
    assert tuned["tuned"] is True
    rounds = tuned["rounds"]
    assert isinstance(rounds, list)
    assert rounds[0] > 32  # the first segment's buffers are new pages (64 per 256 KiB)
    assert max(rounds[1:]) < 2, rounds  # the next ones reuse them


def test_without_it_every_segment_faults_its_pages_in_again() -> None:
    """The reason for it: glibc's defaults hand 256 KiB buffers back to the kernel."""
    rounds = run("default")["rounds"]
    assert isinstance(rounds, list)
    assert min(rounds[1:]) > 32, rounds
