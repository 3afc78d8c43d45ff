"""Reading blocks back: plan coalesced ranged GETs and verify every block's checksum.

Blocks of one segment whose byte ranges are adjacent (a prefix chain written in sequence) are
read with one ranged GET; small gaps (alignment) are read and discarded. Each block is then
sliced out and checked against its CRC: a mismatch is a miss, never data.
"""

from __future__ import annotations

from dataclasses import dataclass

from s3kv.store.index import Location

#: read through a gap of at most this many bytes rather than issue another GET
MAX_GAP = 64 * 1024
#: never coalesce into a single GET larger than this: a long chain becomes several large
#: ranged GETs that the store issues concurrently (READ_CONCURRENCY), not one serial stream
MAX_RUN = 64 * 1024 * 1024


@dataclass
class ReadRun:
    segment: int
    start: int
    end: int
    members: list[tuple[int, Location]]  # (position in the request, location)


def plan_reads(wanted: list[tuple[int, Location]], max_gap: int = MAX_GAP,
               max_run: int = MAX_RUN) -> list[ReadRun]:
    """Group (request position, location) pairs into coalesced ranged reads."""
    runs: list[ReadRun] = []
    ordered = sorted(wanted, key=lambda pl: (pl[1].segment, pl[1].offset))
    for pos, loc in ordered:
        end = loc.offset + loc.length
        last = runs[-1] if runs else None
        if (last is not None and last.segment == loc.segment
                and loc.offset - last.end <= max_gap and loc.offset >= last.start
                and max(end, last.end) - last.start <= max_run):
            last.end = max(last.end, end)
            last.members.append((pos, loc))
        else:
            runs.append(ReadRun(loc.segment, loc.offset, end, [(pos, loc)]))
    return runs
