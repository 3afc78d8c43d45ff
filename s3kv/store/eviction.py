"""Eviction: whole segments go, never single blocks (no small overwrites reach the backend).

- capacity: while sealed + in-memory segment bytes exceed ``capacity``, delete the coldest
  segment (least recently read or sealed: oldest and coldest first);
- TTL: segments sealed more than ``ttl`` seconds ago;
- dead: a segment none of whose blocks is live any more (all deleted or overwritten);
- low live ratio (only with a capacity budget): a segment whose live bytes fell below
  ``compact_threshold`` of its block bytes (after deletes and overwrites) is dropped, or, in
  ``compact`` mode, its hot live blocks (read since written) are first rewritten into the open
  segment. Without a budget, live blocks are never given up to reclaim space.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from s3kv.errors import BackendError
from s3kv.log import get_logger
from s3kv.store.segments import SegmentInfo, SegmentState, segment_key, sidecar_key

if TYPE_CHECKING:
    from s3kv.store.store import BlockStore

log = get_logger(__name__)

INTERVAL = 0.5


class Evictor:
    def __init__(self, store: BlockStore) -> None:
        self.store = store

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(INTERVAL)
            try:
                await self.run_once()
            except BackendError as exc:
                log.warning("eviction.failed", error=str(exc))

    def _choose(self) -> list[tuple[SegmentInfo, str]]:
        s = self.store.settings
        now = time.time()
        sealed = self.store.segments.sealed()
        chosen: dict[int, tuple[SegmentInfo, str]] = {}
        if s.ttl > 0:
            for seg in sealed:
                if now - seg.sealed_at > s.ttl:
                    chosen[seg.seg_id] = (seg, "ttl")
        # Without a capacity budget there is no space to win back at the price of live
        # blocks: only segments with nothing live left go. With one, mostly-dead segments are
        # dropped or compacted as configured.
        threshold = s.compact_threshold if s.capacity > 0 else 0.0
        for seg in sealed:
            if seg.seg_id in chosen or not seg.block_bytes:
                continue
            if seg.live_bytes <= 0:
                chosen[seg.seg_id] = (seg, "dead")
            elif seg.live_ratio < threshold:
                chosen[seg.seg_id] = (seg, "low_live_ratio")
        if s.capacity > 0:
            total = sum(seg.length for seg in sealed if seg.seg_id not in chosen)
            total += self.store.writer.memory_bytes()
            for seg in sorted(sealed, key=lambda x: (x.last_access, x.sealed_at)):
                if total <= s.capacity:
                    break
                if seg.seg_id not in chosen:
                    chosen[seg.seg_id] = (seg, "capacity")
                    total -= seg.length
        return list(chosen.values())

    async def run_once(self) -> int:
        """Evict what the policy picks now; returns the number of segments deleted."""
        done = 0
        for seg, reason in self._choose():
            if reason == "low_live_ratio" and self.store.settings.compact_mode == "compact" \
                    and not await self._compact(seg):
                continue  # the rewrite could not finish (backpressure): keep it, try later
            await self._delete(seg, reason)
            done += 1
        return done

    async def _compact(self, seg: SegmentInfo) -> bool:
        """Rewrite the segment's hot live blocks; False if that could not be completed."""
        store = self.store
        entries = [e for e in store.index.segment_entries(seg.seg_id) if e[3]]
        moved = 0
        for nid, key, loc, _hot in entries:
            name = next((n for n, i in store.namespaces.items() if i == nid), None)
            if name is None:
                continue
            data = (await store.get_many(name, [key], decode=False))[0]
            if data is None:
                continue
            if store.index.get(nid, key) != loc:
                continue  # overwritten meanwhile
            try:
                await store.rewrite(name, key, data, loc)
            except BackendError as exc:
                log.warning("compaction.deferred", segment=seg.name, error=str(exc))
                return False
            moved += len(data)
        store.stats.compactions += 1
        store.stats.compaction_bytes += moved
        log.info("segment.compacted", segment=seg.name, hot_blocks=len(entries), bytes=moved)
        return True

    async def _delete(self, seg: SegmentInfo, reason: str) -> None:
        store = self.store
        keys = [segment_key(store.prefix, seg.name), sidecar_key(store.prefix, seg.name)]
        seg.state = SegmentState.EVICTING  # reads now miss instead of racing the delete
        try:
            await store.writer.retry.run(lambda: store.backend.delete_objects(keys))
        except BackendError:
            seg.state = SegmentState.SEALED  # still there: try again next round
            raise
        blocks = store.forget_segment(seg.seg_id)
        store.stats.evictions += 1
        store.stats.evicted_bytes += seg.length
        log.info("segment.evicted", segment=seg.name, reason=reason, bytes=seg.length,
                 live_blocks=blocks)
