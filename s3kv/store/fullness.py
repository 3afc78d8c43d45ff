"""A backend out of room: what the store does when a write is refused for lack of space.

A bucket quota (Ceph RGW's ``QuotaExceeded``), a MinIO cluster past its free-space threshold or
its bucket quota, or HTTP 507 fails a segment's upload with BackendFull. Waiting frees nothing,
and the bucket still answers HEAD, so a probe would let writes in again only for the next
segment to fail and its acknowledged blocks to be lost, over and over (Ceph RGW with a 60 MiB
bucket quota and no ``--capacity``: 41 segments failed in 25 s, 2,717 blocks acknowledged).

Instead the store takes what it holds on the backend when the refusal came as its capacity
budget from then on (or the configured ``--capacity``, if lower), logs once what to set, and
keeps refusing writes until an eviction round has made room for a new segment under it. A
cache at its capacity evicts; it does not lose what it acknowledges. The learnt budget lasts
until a restart (a quota raised meanwhile is found by the next refusal only).
"""

from __future__ import annotations

from s3kv.errors import full_in
from s3kv.log import get_logger
from s3kv.sizes import format_size
from s3kv.store.eviction import Evictor

log = get_logger(__name__)


class Fullness:
    def __init__(self, evictor: Evictor) -> None:
        """The store's evictor: its budget, segments, settings and writer's health."""
        self.evictor = evictor
        self.segment_size = evictor.settings.segment_size

    def failed(self, exc: BaseException) -> None:
        """A segment failed: if for lack of room, lower the budget to what is stored now and
        refuse writes until a segment fits under it again."""
        full = full_in(exc)
        if full is None:
            return
        stored = self.evictor.catalog.segments.sealed_bytes()
        before = self.evictor.capacity
        budget = self.evictor.lower_capacity(max(stored, 1))  # 0 would mean "no budget"
        if budget != before:
            log.warning("backend.full", error=str(full), capacity=budget,
                        hint=f"the backend holds no more than about {format_size(stored)} for "
                        "this store: set --capacity below the bucket's quota (s3kv keeps "
                        "this budget until it restarts)")
        if budget < 2 * self.segment_size:
            log.error("backend.full_below_two_segments", capacity=budget,
                      hint="the bucket's room holds fewer than two segments: raise its quota "
                      "or lower --segment-size; writes stay refused until then")
        self.evictor.writer.health.mark_full(f"backend full: {full}", self.make_room)

    async def make_room(self) -> bool:
        """An eviction round, then whether a segment fits (False: stay refused, ask later)."""
        if self.evictor.capacity < 2 * self.segment_size:
            return False
        await self.evictor.run_once(opening=self.segment_size)
        return self.evictor.has_room()
