"""The deletes a store saw lately, so that an older write another replica took does not undo
them when its segment arrives by sync.

The index forgets a deleted key: it holds where keys are, not that they were deleted. At start
that is enough, since recovery replays every manifest in stamp order (the tombstone comes after
the older put). Replica sync replays only the segments that are new to it, and one of them may
hold a put older than a delete this store already applied (its own, or a tombstone synced
earlier): another replica wrote the key, the delete went through this one, and the writer's
segment was sealed after the delete. Without the tombstone at hand the old put came back, and
stayed until a restart. A write reaches the other replicas within ``seal_after`` plus
``sync_interval`` (plus an upload's ride through an outage), so a delete is kept that long (the
window) and then forgotten; at most MAX_KEPT of them, the oldest going first.
"""

from __future__ import annotations

import time

#: deletes kept at most (the oldest go first past it): ~150 bytes each
MAX_KEPT = 200_000
#: seconds added to the window (clock steps between replicas, slow listings)
SLACK = 30.0


class RecentDeletes:
    def __init__(self, window: float = 60.0) -> None:
        """``window``: seconds a write may take to reach the other replicas (seal, upload,
        sync); a delete is kept that long and SLACK more (by its stamp)."""
        self.window = window + SLACK
        self._stamps: dict[tuple[str, bytes], float] = {}  # in the order they were noted

    def __len__(self) -> int:
        return len(self._stamps)

    def note(self, namespace: str, key: bytes, stamp: float) -> None:
        """The key was deleted by a tombstone stamped ``stamp``."""
        now = time.time()
        if stamp < now - self.window:
            return  # older than anything still to arrive by sync
        ident = (namespace, key)
        if self._stamps.get(ident, 0.0) < stamp:
            self._stamps.pop(ident, None)  # to the end: the order stays (nearly) by stamp
            self._stamps[ident] = stamp
        self._prune(now)

    def hides(self, namespace: str, key: bytes, written_at: float) -> bool:
        """Whether a delete of the key newer than an entry stamped ``written_at`` is known."""
        return self._stamps.get((namespace, key), 0.0) > written_at

    def _prune(self, now: float) -> None:
        horizon = now - self.window
        stamps = self._stamps
        while stamps:
            ident, stamp = next(iter(stamps.items()))
            if stamp >= horizon and len(stamps) <= MAX_KEPT:
                return
            del stamps[ident]
