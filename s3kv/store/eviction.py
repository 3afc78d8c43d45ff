"""Eviction: whole segments go, never single blocks (no small overwrites reach the backend).

- capacity: while sealed + in-memory segment bytes exceed ``capacity``, delete the coldest
  segment (least recently read or sealed: oldest and coldest first). The segment taking
  writes counts at its full size, and a segment about to open has a round run for it
  (``make_room``); on the file backend the writer waits for that round, so the segment is
  written over the file of the one evicted for it (backends/recycle.py), not onto fresh
  pages while the round that frees a file waits for its interval;
- TTL: segments sealed more than ``ttl`` seconds ago;
- dead: a segment none of whose blocks is live any more (all deleted or overwritten), once the
  deletes and writes that killed them are on the backend (no segment of this store still in
  memory holds an entry from before it died): a crash that loses them then finds the
  segment's blocks again, as it would had the segment been alive (docs/reliability.md);
- low live ratio (only with a capacity budget): a segment whose live bytes fell below
  ``compact_threshold`` of its block bytes (after deletes and overwrites) is dropped, or, in
  ``compact`` mode, its hot live blocks (read since written) are first rewritten into the open
  segment, which is then sealed, and it is deleted once that is on the backend. Without a
  budget, live blocks are never given up to reclaim space;
- obsolete: a segment of tombstones only (a carrier), once no segment older than its newest
  is left; past MERGE_CARRIERS carriers, a round merges those still needed into one.

Before a segment is deleted, the tombstones that keep what it hid hidden are written again
(carry.py): no restart serves a deleted or evicted block's older version.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
import time
from collections.abc import Sequence
from typing import Protocol

from s3kv.backends.base import Backend, lends_windows
from s3kv.config import Settings
from s3kv.errors import BackendError, Backpressure, IntegrityError, ObjectMissing
from s3kv.log import get_logger
from s3kv.store import layout
from s3kv.store.blocks import Block
from s3kv.store.carry import Floor, carried
from s3kv.store.catalog import Catalog
from s3kv.store.index import Location
from s3kv.store.recovery import read_manifest
from s3kv.store.segments import SegmentInfo, SegmentState, segment_key, sidecar_key
from s3kv.store.stats import StoreStats
from s3kv.store.writer import SegmentWriter

log = get_logger(__name__)

INTERVAL = 0.5
#: a segment about to open waits for a round of its own while rounds choose within this
#: (a few thousand segments); a store holding more wakes the loop's round instead
CHEAP_ROUND = 0.005
#: and for at most this long (a slow delete is finished in the background)
ROOM_WAIT = 0.25
#: bytes of hot blocks a compaction reads at once (as coalesced ranged GETs)
COMPACT_READ = 32 * 1024 * 1024
#: carriers (segments of tombstones only) past which a round merges those still needed
MERGE_CARRIERS = 16
#: the states of this store's segments still in memory (not on the backend yet)
_IN_MEMORY = (SegmentState.OPEN, SegmentState.SEALING)
#: seconds by which an entry's stamp may run ahead of the clock (stamps strictly increase)
STAMP_SLACK = 1.0
#: an index entry of a segment: (namespace id, key, location, hot)
Entry = tuple[int, bytes, Location, bool]


class Rewriter(Protocol):
    """What compaction needs of the store: a block's stored bytes, and appending them again."""

    async def get_many(self, namespace: str, keys: Sequence[bytes], *,
                       decode: bool = True) -> list[Block | None]: ...

    async def rewrite(self, namespace: str, key: bytes, data: Block, old: Location) -> int: ...


class Evictor:
    def __init__(self, settings: Settings, backend: Backend, prefix: str, catalog: Catalog,
                 writer: SegmentWriter, stats: StoreStats, rewriter: Rewriter) -> None:
        self.settings = settings
        self.backend = backend
        self.prefix = prefix
        self.catalog = catalog
        self.writer = writer
        self.stats = stats
        self.rewriter = rewriter
        #: the capacity budget: the setting's, or lower once the backend ran out of room
        self.capacity = settings.capacity
        # One round at a time: a round started by ``evict_now`` waits for the loop's round in
        # flight (whose segments are EVICTING: deleted on the backend, still indexed) instead
        # of returning before that round has forgotten them, and no two rounds compact the
        # same segment twice.
        self._round = asyncio.Lock()
        self._wake = asyncio.Event()
        self._choice_time = 0.0  # seconds the last round took to choose
        self._tasks: set[asyncio.Task[int]] = set()  # make_room's rounds in flight
        self._closed = False
        # the file backend: a segment opening takes a file, the one just freed if a round ran
        # first (backends/recycle.py); elsewhere a write need not wait for a delete
        self._reuses_files = lends_windows(type(backend))

    async def make_room(self) -> None:
        """A segment is about to open (the writer's ``make_room``): with a capacity budget,
        a round that counts it at its full size runs first, and the writer waits for it (at
        most ROOM_WAIT) on the file backend while rounds are cheap; else the loop's next
        round is woken."""
        if self.capacity <= 0 or self._closed:
            return
        if self._choice_time > CHEAP_ROUND or self._round.locked() or not self._reuses_files:
            self._wake.set()
            return
        # no compaction in it: its rewrites would wait for the writer, which waits for it
        task = asyncio.create_task(self.run_once(opening=self.settings.segment_size,
                                                 compact=False))
        self._tasks.add(task)
        task.add_done_callback(self._round_done)
        with contextlib.suppress(TimeoutError, BackendError, Backpressure):
            await asyncio.wait_for(asyncio.shield(task), ROOM_WAIT)

    def lower_capacity(self, to: int) -> int:
        """Keep the segments under ``to`` bytes from now on (the backend refused a write for
        lack of room: fullness.py); never raised again until a restart. Returns the budget."""
        self.capacity = to if self.capacity <= 0 else min(self.capacity, to)
        self._wake.set()
        return self.capacity

    def has_room(self) -> bool:
        """Whether a segment opening now fits under the budget beside what is held."""
        held = self.writer.committed_bytes() + self.catalog.segments.sealed_bytes()
        return self.capacity <= 0 or held + self.settings.segment_size <= self.capacity

    def _round_done(self, task: asyncio.Task[int]) -> None:
        self._tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            log.warning("eviction.failed", error=repr(exc))

    def close(self) -> list[asyncio.Task[int]]:
        """No more rounds for segments opening; the ones in flight, to cancel and await."""
        self._closed = True
        return list(self._tasks)

    async def loop(self) -> None:
        """A round every INTERVAL, and one soon after a wake (a segment opened while rounds
        are dear), spaced at nine times the last round's choice: rounds take at most ~10 % of
        a core however many segments they look at."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(INTERVAL):
                    await self._wake.wait()
                await asyncio.sleep(min(INTERVAL, 9 * self._choice_time))
            self._wake.clear()
            try:
                await self.run_once()
            except (BackendError, Backpressure) as exc:  # the next round tries again
                log.warning("eviction.failed", error=str(exc))

    def _choose(self, opening: int) -> tuple[list[tuple[SegmentInfo, str]], Floor]:
        """The segments to evict now and why: past their TTL, then dead or mostly dead, then
        the coldest (least recently read) while the rest is over the capacity, then those
        holding only tombstones (they go if they hide nothing any more); and the floor of what
        deleting them may uncover (carry.py). One pass over the segments, and a heap of them
        only when over the capacity: a sort of every sealed segment each round took 0.54 s at
        400,000 segments (100 TiB of 256 MiB ones). ``opening``: the bytes of a segment about
        to open, counted in."""
        s = self.settings
        now = time.time()
        segments = self.catalog.segments.all()
        # Without a capacity budget there is no space to win back at the price of live
        # blocks: only segments with nothing live left go. With one, mostly-dead segments are
        # dropped or compacted as configured.
        threshold = s.compact_threshold if self.capacity > 0 else 0.0
        expired: list[tuple[SegmentInfo, str]] = []
        reclaim: list[tuple[SegmentInfo, str]] = []
        kept: list[SegmentInfo] = []
        carriers: list[SegmentInfo] = []  # tombstones only: they go once they hide nothing
        total = self.writer.committed_bytes() + opening
        pending = math.inf  # the oldest entry of this store's segments not on the backend yet
        dead: list[SegmentInfo] = []
        for seg in segments:
            if seg.state is not SegmentState.SEALED:
                if seg.own and seg.state in _IN_MEMORY:
                    pending = min(pending, seg.oldest)
                continue
            if not seg.blocks:
                carriers.append(seg)
                total += seg.length
            elif s.ttl > 0 and now - seg.sealed_at > s.ttl:
                expired.append((seg, "ttl"))
            elif seg.dead:
                dead.append(seg)
            elif seg.live_ratio < threshold:
                reclaim.append((seg, "low_live_ratio"))
            else:
                kept.append(seg)
                total += seg.length
        # what killed a dead segment's blocks is on the backend once nothing in memory is older
        reclaim[:0] = [(seg, "dead") for seg in dead if seg.dead_at + STAMP_SLACK < pending]
        coldest: list[tuple[SegmentInfo, str]] = []
        if self.capacity > 0 and total > self.capacity:
            heap = [(seg.last_access, seg.sealed_at, i) for i, seg in enumerate(kept)]
            heapq.heapify(heap)
            while heap and total > self.capacity:
                seg = kept[heapq.heappop(heap)[2]]
                coldest.append((seg, "capacity"))
                total -= seg.length
        chosen = expired + reclaim + coldest
        horizon = now - s.seal_after - s.sync_interval if s.sync_interval > 0 else math.inf
        floor = Floor(segments, len(chosen) + len(carriers) + 2 if chosen or carriers else 0,
                      horizon)
        # whether a carrier hides nothing any more is asked as its turn comes (_run_round),
        # oldest first: then one round takes a chain of them
        carriers.sort(key=lambda seg: seg.oldest)
        return chosen + [(seg, "obsolete") for seg in carriers], floor

    async def run_once(self, opening: int = 0, compact: bool = True) -> int:
        """Evict what the policy picks now; returns the number of segments deleted.
        ``compact`` False: segments to compact are left for a later round."""
        async with self._round:
            return await self._run_round(opening, compact)

    async def _run_round(self, opening: int, compact: bool) -> int:
        done = 0
        kept: list[SegmentInfo] = []  # carriers that still hide something
        start = time.monotonic()
        chosen, floor = self._choose(opening)
        self._choice_time = time.monotonic() - start
        for seg, reason in chosen:
            if reason == "obsolete" and seg.newest > floor.without(seg.seg_id):
                kept.append(seg)  # its tombstones still hide older entries
                continue
            if reason == "low_live_ratio" and self.settings.compact_mode == "compact" \
                    and not (compact and await self._compact(seg)):
                continue  # the rewrite could not finish (backpressure): keep it, try later
            await self._delete(seg, reason, floor.without(seg.seg_id))
            floor.gone(seg.seg_id)
            done += 1
        return done + await self._merge(kept, floor)

    async def _compact(self, seg: SegmentInfo) -> bool:
        """Rewrite the segment's hot live blocks, read a namespace's together in groups of up
        to COMPACT_READ bytes (coalesced ranged GETs, not one GET per block), and wait until
        they are on the backend; False if that could not be completed."""
        index = self.catalog.index
        hot = sorted((e for e in index.segment_entries(seg.seg_id) if e[3]),
                     key=lambda e: (e[0], e[2].offset))
        names = {nid: name for name, nid in self.catalog.namespaces.items()}
        moved = 0
        into: set[int] = set()  # the segments the rewrites went to
        for group in _groups(hot):
            nid, name = group[0][0], names.get(group[0][0])
            if name is None:
                continue
            blocks = await self.rewriter.get_many(name, [e[1] for e in group], decode=False)
            for (_, key, loc, _hot), data in zip(group, blocks, strict=True):
                if data is None or index.get(nid, key) != loc:
                    continue  # gone, or overwritten meanwhile
                try:
                    into.add(await self.rewriter.rewrite(name, key, data, loc))
                except (BackendError, Backpressure) as exc:
                    log.warning("compaction.deferred", segment=seg.name, error=str(exc))
                    return False
                moved += len(data)
        # the old copies go once the new ones are on the backend (their segment sealed now, a
        # shorter one): deleted at once, a crash before the seal lost blocks that were durable
        try:
            for sid in into:
                sealing = self.writer.seal_now(sid, "compaction")
                if sealing is not None:
                    await sealing.on_backend()
        except BackendError as exc:
            log.warning("compaction.deferred", segment=seg.name, error=str(exc))
            return False
        self.stats.compactions += 1
        self.stats.compaction_bytes += moved
        log.info("segment.compacted", segment=seg.name, hot_blocks=len(hot), bytes=moved)
        return True

    async def _delete(self, seg: SegmentInfo, reason: str, floor: float) -> None:
        """Delete the segment, once what it hides is carried over (carry.py)."""
        keys = [segment_key(self.prefix, seg.name), sidecar_key(self.prefix, seg.name)]
        if seg.newest > floor:
            await self._carry([(seg, floor)])
        seg.state = SegmentState.EVICTING  # reads now miss instead of racing the delete
        try:
            await self.writer.retry.run(lambda: self.backend.delete_objects(keys))
        except BackendError:
            seg.state = SegmentState.SEALED  # still there: try again next round
            raise
        blocks = self.catalog.forget_segment(seg.seg_id)
        self.stats.evictions += 1
        self.stats.evicted_bytes += seg.length
        log.info("segment.evicted", segment=seg.name, reason=reason, bytes=seg.length,
                 live_blocks=blocks)

    async def _carry(self, segs: Sequence[tuple[SegmentInfo, float]]) -> None:
        """Write, as one carrier, the tombstones deleting ``segs`` (each with its floor) must
        leave; raises BackendError or Backpressure if they could not be read or written (the
        segments then stay)."""
        cat = self.catalog
        tombs: dict[tuple[str, bytes], layout.Entry] = {}
        for seg, floor in segs:
            try:
                manifest, _ = await read_manifest(self.backend, self.prefix, seg.name,
                                                  seg.length)
            except IntegrityError as exc:  # recovery skips such a segment: it hides nothing
                log.warning("eviction.manifest_unreadable", segment=seg.name, error=str(exc))
                continue
            except ObjectMissing:  # deleted already (another replica evicted it, having
                log.info("eviction.segment_gone", segment=seg.name)  # carried what it hid)
                continue
            layout.keep_newest(carried(manifest, seg.seg_id, cat.namespaces, cat.index,
                                       floor, self._unsealed(), cat.lost.get(seg.seg_id, ())),
                               tombs)
        if tombs:
            await self.writer.write_entries(list(tombs.values()))
            self.stats.tombstones_carried += len(tombs)
            log.info("segment.tombstones_carried", segments=len(segs), tombstones=len(tombs))

    def _unsealed(self) -> set[tuple[str, bytes]]:
        """The (namespace, key) of the entries in this store's segments not on the backend
        yet: the writes and deletes a crash would lose (carry.py)."""
        return {(e.namespace, e.key) for seg in self.writer.unsealed() for e in seg.entries}

    async def _merge(self, carriers: list[SegmentInfo], floor: Floor) -> int:
        """More than MERGE_CARRIERS carriers still hide something: their tombstones go into
        one, and they go (each is a backend object, and a manifest to read at every start)."""
        if len(carriers) <= MERGE_CARRIERS:
            return 0
        await self._carry([(seg, floor.without(seg.seg_id)) for seg in carriers])
        for seg in carriers:
            await self._delete(seg, "merged", math.inf)  # carried above
            floor.gone(seg.seg_id)
        return len(carriers)


def _groups(entries: list[Entry]) -> list[list[Entry]]:
    """``entries`` (sorted by namespace) in groups of one namespace, up to COMPACT_READ bytes
    each (at least one entry)."""
    groups: list[list[Entry]] = []
    size = 0
    for e in entries:
        if not groups or groups[-1][0][0] != e[0] or size + e[2].length > COMPACT_READ:
            groups.append([])
            size = 0
        groups[-1].append(e)
        size += e[2].length
    return groups
