"""What deleting a segment must leave behind, so that no restart brings back what it hid.

Recovery replays every manifest on the backend, last writer wins: an entry hides the older
entries of its key in other segments (a tombstone hides an older put, a put an older put).
Deleting a segment (eviction: dead, mostly dead, past its TTL, the coldest over the capacity)
takes those entries away, and the next start (a restart, a replica starting) replayed the older
puts again: a deleted object came back, an overwritten one came back at its old value, an
evicted block came back at an older one. So before a segment is deleted, each of its entries
that may still hide something is written again as a tombstone stamped as it was, into a small
segment of its own (``SegmentWriter.write_entries``), on the backend before the delete:

- a tombstone, unless a newer put of its key is indexed (that put hides the older ones);
- a put the index still serves from this segment (evicted live: a miss from now on), or
  forgot because its block failed its checksum (``lost``: a miss already, not a deletion);
- any entry of a key written or deleted again in a segment of this store still in memory
  (``unsealed``): a crash loses that write, and without the tombstone the restart served the
  version before this segment's (a mostly dead segment dropped while a block of it was
  overwritten or deleted in the open segment brought back the block's older value).

An entry "may hide something" only if it is newer than the oldest entry of every other segment
present (the floor: :class:`Floor`); nothing older than all of them can survive elsewhere.
Segments mostly go oldest first, so usually nothing is carried. With replicas (``sync_interval``
> 0) the floor is at most ``seal_after + sync_interval`` ago: a replica's segment this one has
not listed yet may hold entries that recent. A segment of tombstones only is deleted once the
floor has passed its newest entry (eviction.py: "obsolete").
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Container, Iterable, Mapping

from s3kv.store import layout
from s3kv.store.index import BlockIndex
from s3kv.store.segments import SegmentInfo, SegmentState

#: segments whose entries count for the floor (an evicting or failed one is going)
PRESENT = (SegmentState.OPEN, SegmentState.SEALING, SegmentState.SEALED)


class Floor:
    """The oldest entry of the segments present, but the one being deleted and those deleted
    earlier in the round, capped at ``horizon``. Built from the ``k`` segments with the oldest
    entries: a round deletes fewer than ``k - 1`` segments."""

    def __init__(self, segments: Iterable[SegmentInfo], k: int,
                 horizon: float = math.inf) -> None:
        self._oldest = heapq.nsmallest(k, ((s.oldest, s.seg_id) for s in segments
                                           if s.state in PRESENT and s.oldest < math.inf))
        self._gone: set[int] = set()
        self.horizon = horizon

    def gone(self, seg_id: int) -> None:
        """The segment was deleted: its entries no longer count."""
        self._gone.add(seg_id)

    def without(self, seg_id: int) -> float:
        """The floor for deleting ``seg_id``: the oldest entry of every other segment still
        present."""
        for oldest, sid in self._oldest:
            if sid != seg_id and sid not in self._gone:
                return min(oldest, self.horizon)
        return self.horizon


def carried(manifest: layout.Manifest, seg_id: int, namespaces: Mapping[str, int],
            index: BlockIndex, floor: float,
            unsealed: Container[tuple[str, bytes]] = (),
            lost: Container[tuple[int, bytes]] = ()) -> list[layout.Entry]:
    """The tombstones that deleting segment ``seg_id`` (whose manifest this is) must leave:
    one per key whose newest entry in the segment is newer than ``floor`` and still hides
    something (the module's docstring). ``unsealed``: the (namespace, key) of the entries in
    this store's segments not on the backend yet; ``lost``: the (namespace id, key) of the
    segment's blocks the index forgot as corrupt."""
    newest: dict[tuple[str, bytes], layout.Entry] = {}
    layout.keep_newest((e for e in manifest.entries if e.written_at > floor), newest)
    out: list[layout.Entry] = []
    for (ns, key), e in newest.items():
        nid = namespaces.get(ns)
        current = None if nid is None else index.get(nid, key)
        if (ns, key) in unsealed:  # replaced by a write that a crash may still lose
            keep = True
        elif e.tombstone:
            keep = current is None or current.written_at < e.written_at
        elif current is None:  # forgotten as corrupt (else deleted or overwritten elsewhere)
            keep = (nid, key) in lost
        else:  # evicted live
            keep = current.segment == seg_id
        if keep:
            out.append(layout.tombstone_for(ns, key, e.written_at))
    return out
