"""The segment writer: appends blocks into the open segment and uploads it part by part.

One segment is open at a time. Blocks are appended at ``block_align`` boundaries; every
``part_size`` bytes become one multipart part, queued for upload at once (a segment that ends
within its first part is written with one PUT instead). A segment is sealed when the next block
would not fit (then it is *full* and ends exactly at ``segment_size``), when ``seal_after``
seconds have passed since its first block, or on flush/close (then it is simply shorter).
Sealing appends the manifest and trailer, completes the upload and writes the sidecar manifest.
Until then the segment's bytes stay in memory and reads are served from there.

Memory is bounded: at most ``max_open_segments`` segments (open + sealing) are held; a write
that needs another one waits briefly and then raises Backpressure. A segment's uploads ride out
a backend outage (a restart of the S3 server) of up to 10 s, its bytes held meanwhile
(``retry.riding_out``). When an upload fails for good, writes raise Backpressure at once until a
probe or an upload finds the backend up again (health.py).

Blocks can also be received straight into their place (rooms.py, landing.py) where the
backend lends windows onto its uploads (the file backend).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Awaitable, Callable, Sequence

from s3kv.backends.base import Backend
from s3kv.backends.multipart import MultipartUpload
from s3kv.config import Settings
from s3kv.errors import BackendError, BackendUnavailable, Backpressure
from s3kv.log import get_logger
from s3kv.retry import RetryPolicy, riding_out
from s3kv.store import layout
from s3kv.store.health import BackendHealth
from s3kv.store.open_segment import OpenSegment
from s3kv.store.pacing import UploadSlots
from s3kv.store.segments import (
    SegmentInfo,
    SegmentState,
    SegmentTable,
    default_node_id,
    segment_key,
    sidecar_key,
)
from s3kv.store.stamps import Stamps
from s3kv.store.stats import StoreStats
from s3kv.store.uploading import upload_segment
from s3kv.wire.body import Pieces, size_of

log = get_logger(__name__)


class SegmentWriter:
    def __init__(self, backend: Backend, prefix: str, settings: Settings, table: SegmentTable,
                 stats: StoreStats, on_failed: Callable[[SegmentInfo, BaseException], None],
                 reads_waiting: Callable[[], bool] = lambda: False,
                 stamps: Stamps | None = None) -> None:
        """``reads_waiting``: whether reads wait on the backend now (uploads yield: pacing.py);
        ``stamps``: where entries' stamps come from (the catalog's: stamps.py)."""
        self.backend = backend
        self.prefix = prefix
        self.s = settings
        self.table = table
        self.stats = stats
        self.on_failed = on_failed
        #: the store's backend requests (reads, deletes, records): a few quick attempts
        self.retry = RetryPolicy(deadline=min(10.0, settings.backend_timeout))
        self.upload_retry = riding_out(settings.backend_timeout)  # a segment's uploads
        self.node_id = settings.node_id or default_node_id()
        self._epoch = f"{int(time.time() * 1000):012x}"
        self._seq = 0
        self.stamps = stamps or Stamps()  # shared with the catalog (stamps.py)
        self._current: OpenSegment | None = None
        self._in_memory: dict[int, OpenSegment] = {}
        self._lock = asyncio.Lock()
        self._room = asyncio.Condition()
        self._slots = UploadSlots(settings.max_parts_in_flight,
                                  settings.parts_in_flight_reading, reads_waiting)
        self._tasks: set[asyncio.Task[None]] = set()
        # tombstones standing for a failed segment's entries, for the next segment to hold
        self._unrecorded: dict[tuple[str, bytes], layout.Entry] = {}
        self.health = BackendHealth(backend, stats)
        self.make_room: Callable[[], Awaitable[None]] | None = None  # the store's evictor

    # ---- public -------------------------------------------------------------------------
    @property
    def lock(self) -> asyncio.Lock:
        """Held while a block is placed (rooms.py takes it to hold room for blocks)."""
        return self._lock

    @property
    def current(self) -> OpenSegment | None:
        """The open segment taking writes, if any."""
        return self._current

    @property
    def open_segments(self) -> int:
        return len(self._in_memory)

    @property
    def uploads_paced(self) -> int:
        """Part uploads that waited because reads were waiting on the backend."""
        return self._slots.held_back

    def memory_bytes(self) -> int:
        return sum(seg.size for seg in self._in_memory.values())

    def committed_bytes(self) -> int:
        """Backend bytes the segments in memory stand for: the one taking writes at its full
        size (it fills before another opens), those sealing at their own."""
        return sum(seg.size if seg.sealing else max(seg.size, self.s.segment_size)
                   for seg in self._in_memory.values())

    def holds(self, seg_id: int) -> bool:
        """Whether the segment's bytes are still in memory (open, or sealing)."""
        return seg_id in self._in_memory

    def read(self, seg_id: int, offset: int, length: int) -> list[memoryview] | None:
        """Bytes of a segment still in memory as views of its pieces; None: read the backend."""
        seg = self._in_memory.get(seg_id)
        return None if seg is None else seg.read(offset, length)

    async def append(self, entry: layout.Entry, data: Pieces
                     ) -> tuple[OpenSegment, layout.Entry]:
        """Append one block (or a tombstone, with empty data): one buffer, or pieces.

        Returns the segment and the entry as placed: its offset, and its written_at stamped
        under the writer's lock, so that stamps order exactly as appends do (an entry that
        already carries one, a compaction rewrite, keeps it).
        """
        self.health.check()
        async with self._lock:
            self.health.check()  # again: the backend may have failed while we queued
            return await self._place(entry, data)

    async def append_many(self, items: Sequence[tuple[layout.Entry, Pieces]],
                          placed: Callable[[int, OpenSegment, layout.Entry], None]
                          ) -> Backpressure | None:
        """Append blocks one after another under one hold of the lock, so that no other
        request's block lands between them: a prefix chain written in one batch is one byte
        range, read back with one ranged GET. (Appended one lock hold each, concurrent batches
        interleaved block by block as soon as a wait for room queued them on the lock, and then
        every block of a chain took a ranged GET of its own.)

        ``placed(i, segment, entry)`` is called as item ``i`` is placed, before anything else
        runs (the store indexes it there: a segment that fails or is evicted while the rest of
        the batch waits for room must find it). Returns the Backpressure that stopped the
        batch part way (None: all placed); raises it if nothing was placed."""
        self.health.check()
        done = 0
        async with self._lock:
            try:
                for i, (entry, data) in enumerate(items):
                    self.health.check()
                    seg, entry_placed = await self._place(entry, data)
                    placed(i, seg, entry_placed)
                    done += 1
            except Backpressure as exc:
                if not done:
                    raise
                return exc
        return None

    async def _place(self, entry: layout.Entry, data: Pieces
                     ) -> tuple[OpenSegment, layout.Entry]:
        """Append one block; the caller holds the lock."""
        size = size_of(data)
        seg = await self.segment_for(entry.namespace, entry.key, size, len(entry.attrs))
        offset = seg.append(data, self.s.block_align) if size else 0
        placed = self.enter(seg, entry, offset, size)
        self.started(seg)
        return seg, placed

    def enter(self, seg: OpenSegment, entry: layout.Entry, offset: int,
              size: int) -> layout.Entry:
        """The entry of a block whose ``size`` bytes are at ``offset`` in ``seg``, stamped
        (unless it carries a stamp), into the segment's manifest and byte counts."""
        placed = layout.Entry(entry.namespace, entry.key, offset, entry.length,
                              entry.raw_length, entry.crc, entry.codec,
                              entry.written_at or self.stamps.next(), entry.flags, entry.attrs)
        seg.add_entry(placed)
        seg.info.saw(placed.written_at)
        if not placed.tombstone:
            seg.info.added(size)
            seg.info.gained(size)
        return placed

    def started(self, seg: OpenSegment) -> None:
        """The segment has its first block: it seals ``seal_after`` seconds from now."""
        if seg.first_at == 0.0:
            seg.first_at = time.monotonic()
            seg.timer = asyncio.get_running_loop().call_later(
                self.s.seal_after, self._seal_soon, seg, "deadline")

    def seal_now(self, seg_id: int, reason: str) -> OpenSegment | None:
        """Seal the segment now if it is still open (as its ``seal_after`` timer would); it,
        to wait for with ``on_backend()``, or None if it is not in memory (sealed)."""
        seg = self._in_memory.get(seg_id)
        if seg is None:
            return None
        self._seal_soon(seg, reason)
        return seg

    def in_memory(self, seg_id: int) -> OpenSegment | None:
        """The segment if it is not on the backend yet (``on_backend()`` waits); else None."""
        return self._in_memory.get(seg_id)

    def unsealed(self) -> list[OpenSegment]:
        """This store's segments not on the backend yet (open, or sealing)."""
        return list(self._in_memory.values())

    async def flush(self) -> None:
        """Seal the open segment now, wait until every segment in memory is on the backend."""
        async with self._lock:
            seg = self._current
            if seg is not None and (seg.entries or seg.landing or seg.first_at):  # or room given up
                self._seal_soon(seg, "flush")
        pending = [s.on_backend() for s in self._in_memory.values()]
        results = await asyncio.gather(*pending, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise BackendUnavailable(f"flush: {len(errors)} segment(s) failed: {errors[0]}")
        await self._write_unrecorded("flush")

    async def close(self) -> None:
        try:
            await self.flush()
        except BackendError as exc:
            log.error("writer.close_flush_failed", error=str(exc))
        finally:
            try:
                await self._write_unrecorded("close")
            except BackendError as exc:
                log.error("writer.tombstones_lost", error=str(exc))
            self.health.close()
            for seg in list(self._in_memory.values()):
                if not seg.entries and not seg.landing and seg.uploader is not None:
                    seg.uploader.cancel()
                    await seg.upload.abort()
            for task in list(self._tasks):
                task.cancel()

    # ---- segments -----------------------------------------------------------------------
    async def segment_for(self, namespace: str, key: bytes, length: int,
                          attrs: int = 0) -> OpenSegment:
        """The open segment with room for the block (key, length, ``attrs`` bytes of
        attributes), the one before sealed as full if it has none; the caller holds the lock."""
        seg = self._current
        if seg is not None and seg.room_for(namespace, key, length, self.s.block_align,
                                            self.s.segment_size, attrs):
            return seg
        if seg is not None:
            self._seal_soon(seg, "full")
        await self._wait_for_room()
        if self.make_room is not None:  # freed first: on the file backend, the file written over
            await self.make_room()
        return self._open_segment()

    async def _wait_for_room(self) -> None:
        if len(self._in_memory) < self.s.max_open_segments and self.health.healthy:
            return
        wait = min(2.0, self.s.seal_after)
        try:
            async with asyncio.timeout(wait), self._room:
                await self._room.wait_for(
                    lambda: len(self._in_memory) < self.s.max_open_segments)
        except TimeoutError:
            self.stats.backpressure_rejections += 1
            raise Backpressure(
                f"{len(self._in_memory)} segments are still uploading; the backend is slower "
                "than the write stream. Retry later.", 1.0) from None
        self.health.check()

    async def write_entries(self, entries: Sequence[layout.Entry]) -> None:
        """A segment of its own for entries without bytes (the tombstones a deleted segment
        leaves behind: carry.py), sealed at once; returns once it is on the backend, raises
        Backpressure (the backend is marked down) or BackendError if it could not be written.
        It takes no writes: the segment that does neither waits for it nor is sealed early."""
        self.health.check()
        await self._standalone(entries, "carried")

    async def _standalone(self, entries: Sequence[layout.Entry], reason: str) -> None:
        seg = self._open_segment(current=False)
        for entry in entries:
            self.enter(seg, entry, 0, 0)
        self._seal_soon(seg, reason)
        await seg.on_backend()

    async def _write_unrecorded(self, reason: str) -> None:
        """At a flush (a delete is on the backend once it answers) and at close: failed
        segments' tombstones no segment took yet, in a segment of their own, tried even while
        the backend is marked down. Raises BackendError (they are kept again: _fail)."""
        if self._unrecorded:
            entries = list(self._unrecorded.values())
            self._unrecorded.clear()
            await self._standalone(entries, reason)

    def _open_segment(self, current: bool = True) -> OpenSegment:
        self._seq += 1
        name = f"{self.node_id}/{self._epoch}-{self._seq:08d}"
        info = self.table.add(name, SegmentState.OPEN)
        upload = MultipartUpload(self.backend, segment_key(self.prefix, name), self.s.part_size,
                                 self.upload_retry, self._slots)
        seg = OpenSegment(info, self.s.part_size, upload)
        seg.uploader = asyncio.create_task(
            upload_segment(seg, self.backend, self.prefix, self.upload_retry, self._slots),
            context=contextvars.Context())
        seg.uploader.add_done_callback(functools.partial(self._uploader_done, seg))
        self._in_memory[info.seg_id] = seg
        if current:
            self._current = seg
            for entry in self._unrecorded.values():
                self.enter(seg, entry, 0, 0)
            self._unrecorded.clear()
        return seg

    def _uploader_done(self, seg: OpenSegment, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        if not seg.sealing:  # fail fast: the writer stops taking writes into a doomed segment
            self.health.mark_down(f"upload of {seg.info.name} failed: {exc}")
            self._seal_soon(seg, "failed")

    def _seal_soon(self, seg: OpenSegment, reason: str) -> None:
        if seg.sealing:
            return
        seg.sealing = True
        if seg.timer is not None:
            seg.timer.cancel()
        if self._current is seg:
            self._current = None
        # a fresh context: the seal is not part of the request that happened to trigger it
        task = asyncio.create_task(self._seal(seg, reason), context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _seal(self, seg: OpenSegment, reason: str) -> None:
        info = seg.info
        info.state = SegmentState.SEALING
        try:
            await seg.settled()  # every block being received into it is in, or given up
            body = seg.close(self.s.segment_size if reason == "full" else None)
            assert seg.uploader is not None
            await seg.uploader
            await self.upload_retry.run(lambda: self.backend.put_object(
                sidecar_key(self.prefix, info.name), body))
        except BaseException as exc:
            await seg.upload.abort()
            self._fail(seg, exc)
            return
        finally:
            if seg.uploader is not None and not seg.uploader.done():
                seg.uploader.cancel()
        info.length = seg.size
        info.sealed_at = info.last_access = time.time()
        info.state = SegmentState.SEALED
        self.stats.segments_sealed += 1
        self.health.mark_up()
        self.stats.backend_bytes_written += seg.size + len(body)
        log.info("segment.sealed", segment=info.name, reason=reason, bytes=seg.size,
                 blocks=len(seg.entries))
        await self._release(seg)
        seg.done.set_result(None)

    def _fail(self, seg: OpenSegment, exc: BaseException) -> None:
        info = seg.info
        info.state = SegmentState.FAILED
        self.stats.segments_failed += 1
        self.stats.backend_errors += 1
        self.health.mark_down(f"{type(exc).__name__}: {exc}")
        log.error("segment.failed", segment=info.name, blocks=len(seg.entries), error=str(exc))
        self.on_failed(info, exc)
        # What its entries hid stays hidden: its blocks and deletes are lost (the index forgot
        # them), and a tombstone for each, stamped as it was, goes into the next segment, so
        # that no restart serves an older version of them from an older segment.
        layout.keep_newest((layout.tombstone_for(e.namespace, e.key, e.written_at)
                            for e in seg.entries), self._unrecorded)
        err = exc if isinstance(exc, BackendError) else BackendUnavailable(str(exc))
        if not seg.done.done():
            seg.done.set_exception(err)
            seg.done.exception()  # retrieved: durable waiters, if any, still get it
        self._in_memory.pop(info.seg_id, None)  # failed: no longer served, nor flushed
        task = asyncio.create_task(self._release(seg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _release(self, seg: OpenSegment) -> None:
        """Forget a segment's bytes (uploaded, or failed: no longer read). On the loop: in a
        worker thread, unmapping the windows costs +3 % CPU per GiB of 32 MiB PUTs."""
        self._in_memory.pop(seg.info.seg_id, None)
        seg.release()
        async with self._room:
            self._room.notify_all()
