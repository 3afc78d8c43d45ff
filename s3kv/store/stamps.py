"""Entry stamps: last writer wins by them, so a write must be stamped after what it follows.

A stamp is wall-clock time, strictly increasing within a store, and never earlier than a stamp
the store has seen: its own, or one read from the backend (another replica's entries, synced or
replayed at start; a namespace record's creation; a deletion marker). A replica whose clock is
behind another's thus still stamps a write it takes after it learnt of the other's delete (or a
delete after it learnt of the other's write) after it, as a hybrid logical clock does: the
order the client saw is the order every replica and every restart keeps. Between writes no
replica has seen the other of, wall-clock order decides (docs/format.md).
"""

from __future__ import annotations

import time

from s3kv.log import get_logger

log = get_logger(__name__)

#: a stamp seen this far ahead of the clock is logged (a replica's clock is ahead of ours)
AHEAD = 1.0
#: a stamp further ahead than this is not followed: a replica's clock that far off (or a stamp
#: no clock gave, in a manifest another tool wrote) would carry every later stamp of every
#: replica with it, for good; between such clocks wall-clock order decides, as without stamps
FOLLOW_AT_MOST = 600.0


class Stamps:
    def __init__(self) -> None:
        self.last = 0.0  # the latest stamp given out or seen
        self._warned = False  # of a stamp too far ahead (once: a manifest has many)

    def next(self) -> float:
        """A new stamp: now, or just after the latest one given out or seen."""
        now = max(time.time(), self.last + 1e-6)
        self.last = now
        return now

    def saw(self, stamp: float) -> None:
        """A stamp read from the backend: stamps given out from now on come after it."""
        if stamp > self.last:
            ahead = stamp - time.time()
            if ahead > FOLLOW_AT_MOST:
                if not self._warned:
                    self._warned = True
                    log.warning("store.stamp_too_far_ahead", seconds=round(ahead),
                                detail="not followed: check the clocks of the replicas")
                return
            if ahead > AHEAD and self.last - time.time() < AHEAD:  # logged as it starts
                log.warning("store.clock_behind", seconds=round(ahead, 3))
            self.last = stamp
