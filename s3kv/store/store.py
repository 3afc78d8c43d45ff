"""BlockStore: the block store's public face. Knows nothing of HTTP.

put -> codec -> checksum -> segment writer (-> backend); get -> index -> memory / DRAM tier /
coalesced ranged GET -> checksum -> codec. Recovery, replica sync and eviction run beside it,
on the store's :class:`~s3kv.store.catalog.Catalog` (what is where), never on the store: no
other module of s3kv.store imports this one.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, Awaitable, Sequence
from typing import NamedTuple

from s3kv.backends import open_backend
from s3kv.backends.base import Backend
from s3kv.config import Settings
from s3kv.errors import BackendUnavailable, Backpressure, NamespaceExists, NamespaceNotEmpty
from s3kv.store import layout, listing
from s3kv.store.blocks import Block
from s3kv.store.catalog import Catalog, validate_namespace
from s3kv.store.codecs import CodecSpec, parse_codec_spec
from s3kv.store.dram import DramCache, frozen_copy
from s3kv.store.eviction import Evictor
from s3kv.store.fetch import BlockFetcher
from s3kv.store.fullness import Fullness
from s3kv.store.index import BlockIndex, Location
from s3kv.store.ingest import prepare
from s3kv.store.landing import LAND_MIN, Landing, reserve, reserve_now
from s3kv.store.locate import Locator
from s3kv.store.namespaces import NamespaceRecords
from s3kv.store.open_segment import OpenSegment, Room
from s3kv.store.recovery import Recovery
from s3kv.store.segments import SegmentInfo, SegmentState, SegmentTable
from s3kv.store.shared_reads import SharedReads
from s3kv.store.stats import StoreStats
from s3kv.store.unverified import Sendable
from s3kv.store.writer import SegmentWriter
from s3kv.wire.body import Pieces


class BlockMeta(NamedTuple):
    key: bytes
    size: int  # bytes the client wrote
    crc: int
    written_at: float
    codec: int
    attrs: bytes = b""  # opaque, stored with the block (the S3 front's object metadata)

    @property
    def etag(self) -> str:
        return f"{self.crc:08x}{self.size:x}"


class BlockStore:
    def __init__(self, backend: Backend, prefix: str, settings: Settings, *,
                 owns_backend: bool = False) -> None:
        """``owns_backend``: close the backend on :meth:`close`."""
        self.backend = backend
        self.prefix = prefix
        self.settings = settings
        self.stats = StoreStats()
        self.catalog = Catalog(settings.replica_lag)
        self.dram = DramCache(settings.dram_cache)
        self.writer = SegmentWriter(
            backend, prefix, settings, self.catalog.segments, self.stats, self._segment_failed,
            reads_waiting=lambda: self.fetcher.reading, stamps=self.catalog.stamps)
        self.ready = False
        self.fetcher = BlockFetcher(
            backend, prefix, self.catalog.index, self.catalog.segments, self.dram, self.writer,
            self.stats, self.catalog.forget_segment, self.catalog.lose, settings.read_ahead,
            settings.max_read_memory)
        self._records = NamespaceRecords(backend, prefix, self.writer.retry, self.catalog.stamps)
        self._recovery = Recovery(
            backend, prefix, self.catalog, self.writer.node_id, settings.sync_interval,
            self._records, self.dram.invalidate_namespace,
            bare_after=settings.backend_timeout + settings.sync_interval)
        self._evictor = Evictor(settings, backend, prefix, self.catalog, self.writer,
                                self.stats, self)
        self.writer.make_room = self._evictor.make_room
        self._fullness = Fullness(self._evictor)
        self.shared_reads = SharedReads(settings.max_request_memory // 4)  # ranged GETs
        self.locator = Locator(backend, prefix, self.catalog, self.dram, self.writer, self.stats)
        self._background: list[asyncio.Task[None]] = []
        self._owns_backend = owns_backend
        self._fill_on_write = self.dram.enabled and settings.dram_fill == "write"

    # ---- what is where (the catalog's, read by the gateway and tests) -------------------
    @property
    def index(self) -> BlockIndex:
        return self.catalog.index

    @property
    def segments(self) -> SegmentTable:
        return self.catalog.segments

    @property
    def namespaces(self) -> dict[str, int]:
        return self.catalog.namespaces

    @property
    def namespace_codecs(self) -> dict[str, CodecSpec]:
        return self.catalog.namespace_codecs

    @property
    def namespace_created(self) -> dict[str, float]:
        return self.catalog.namespace_created

    # ---- lifecycle ----------------------------------------------------------------------
    @classmethod
    async def open(cls, settings: Settings, backend: Backend | None = None,
                   prefix: str = "") -> BlockStore:
        """Open the backend, rebuild the index from manifests, start sync and eviction."""
        owns = backend is None
        if backend is None:
            backend, prefix = await open_backend(settings.store,
                                                 request_timeout=settings.backend_timeout,
                                                 read_stall=settings.read_stall)
        store = cls(backend, prefix, settings, owns_backend=owns)
        try:
            await store.start()
        except BaseException:  # the index could not be rebuilt: nothing left open
            if owns:
                await backend.close()
            raise
        return store

    async def start(self) -> None:
        """Rebuild the index from manifests, then start replica sync and eviction (once)."""
        assert not self.ready, "the store is started already"
        await self._recovery.rebuild()
        self.ready = True
        self._background.append(asyncio.create_task(self._recovery.sync_loop()))
        self._background.append(asyncio.create_task(self._evictor.loop()))

    async def close(self) -> None:
        """Seal and upload everything in memory, stop background work, close the backend."""
        pending = [*self._background, *self.fetcher.readahead.close(), *self._evictor.close()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        try:
            await self.writer.close()
        finally:
            if self._owns_backend:
                await self.backend.close()

    async def flush(self) -> None:
        await self.writer.flush()

    async def recovery_sync(self) -> int:  # other replicas' new segments now (also on a timer)
        return await self._recovery.sync_once()

    # ---- namespaces ---------------------------------------------------------------------
    def ns_id(self, name: str) -> int:
        return self.catalog.ns_id(name)

    async def create_namespace(self, name: str, codec: str | CodecSpec | None = None) -> None:
        """Create a namespace with its default codec (``none``, ``zstd:level=3``, ``kvq:...``:
        a lossy codec only ever applies to a namespace created with it)."""
        validate_namespace(name)
        if name in self.namespaces:
            raise NamespaceExists(f"namespace {name!r} already exists")
        if codec is None:
            codec = self.settings.default_codec
        spec = parse_codec_spec(codec) if isinstance(codec, str) else codec
        self.catalog.free_id()  # refused before its record is written, if there is no room
        created, written = await self._records.create(name, spec)
        self.stats.backend_bytes_written += written
        self.catalog.register_namespace(name, spec, created)

    async def delete_namespace(self, name: str) -> None:
        """Delete an empty namespace, for every replica (s3kv/store/namespaces.py)."""
        nid = self.ns_id(name)
        if self.index.count_namespace(nid):
            raise NamespaceNotEmpty(f"namespace {name!r} is not empty")
        stamp = await self._records.delete(name)
        if self.catalog.delete_namespace(name, stamp) is None:  # created "after" (a clock step)
            self.catalog.drop_namespace(name)
        self.dram.invalidate_namespace(nid)

    def list_namespaces(self) -> list[str]:
        return sorted(self.namespaces)

    # ---- writes -------------------------------------------------------------------------
    async def put(self, namespace: str, key: bytes, data: Pieces, *,
                  durable: bool = False, codec: CodecSpec | None = None,
                  attrs: bytes = b"", crc: int | None = None) -> BlockMeta:
        """Store a block. Write-back by default; ``durable`` waits until its segment is sealed.

        ``codec``: this block's codec (the gateway derives it from the namespace's and the
        request's declarations); None: the namespace's. Encoding runs off the event loop.
        Raises TooLarge, NamespaceNotFound, InvalidInput (a block that does not fit the
        declared shape), or Backpressure (retry later). ``attrs``: opaque bytes kept with the
        block in the index and its manifest entry (at most ``layout.MAX_ATTRS_BYTES``).
        ``data`` may be the pieces a body arrived in (copied once, into the open segment);
        ``crc``: their ``layout.checksum`` if the caller computed it while they arrived (used
        only when the block is stored as it is, with no codec)."""
        nid = self.ns_id(namespace)
        ready = await prepare(namespace, key, data, codec or self.namespace_codecs[namespace],
                              max_block_size=self.settings.max_block_size, attrs=attrs, crc=crc)
        seg, placed = await self.writer.append(ready.entry, ready.stored)
        meta = self._placed(nid, data, seg, placed)
        if durable:
            await seg.on_backend()
        return meta

    async def land(self, namespace: str, blocks: Sequence[tuple[bytes, int]], *,
                   codec: CodecSpec | None = None, attrs: int = 0,
                   least: int = LAND_MIN) -> Landing | None:
        """Room for blocks (key, length) received straight into their segment (landing.py),
        with room for up to ``attrs`` bytes of attributes each; None: ``put`` them (as under
        ``least`` bytes). Raises as ``put`` does (NamespaceNotFound, TooLarge, ...)."""
        self.ns_id(namespace)
        return await reserve(self.writer, namespace, blocks,
                             codec or self.namespace_codecs[namespace],
                             self.settings.max_block_size, attrs, least)

    def land_now(self, namespace: str, blocks: Sequence[tuple[bytes, int]], *,
                 least: int = LAND_MIN) -> Landing | None:  # land's, if it needs no wait
        self.ns_id(namespace)  # blocks stored as they are, with no attributes
        return reserve_now(self.writer, namespace, blocks, self.namespace_codecs[namespace],
                           self.settings.max_block_size, 0, least)

    def landed(self, landing: Landing, crcs: Sequence[int], attrs: bytes = b""
               ) -> list[BlockMeta]:
        """A landing's blocks are in and verified (``crcs``): into the index, as ``put``
        does. Raises BackendUnavailable as Landing.commit does."""
        nid = self.ns_id(landing.namespace)
        metas = []

        def placed(room: Room, entry: layout.Entry) -> None:
            metas.append(self._placed(nid, room.window, room.segment, entry))
            self.stats.blocks_landed += 1

        landing.commit(crcs, attrs, placed)
        return metas

    async def put_many(self, namespace: str, items: Sequence[tuple[bytes, Pieces]], *,
                       codec: CodecSpec | None = None) -> int:
        """Store the blocks of one request one after another in the open segment (no other
        request's block between them), so that a chain written in one batch is read back with
        one ranged GET. Every block is checked, encoded and checksummed before the first is
        appended: a bad one (TooLarge, InvalidInput) stores none. Returns how many were stored
        (all); Backpressure's ``stored`` says how many leading blocks are in when the store
        pushed back part way."""
        nid = self.ns_id(namespace)
        spec = codec or self.namespace_codecs[namespace]
        ready = [await prepare(namespace, k, d, spec, max_block_size=self.settings.max_block_size)
                 for k, d in items]
        stored = 0

        def placed(i: int, seg: OpenSegment, entry: layout.Entry) -> None:
            nonlocal stored
            self._placed(nid, items[i][1], seg, entry)
            stored += 1

        stopped = await self.writer.append_many([(r.entry, r.stored) for r in ready], placed)
        if stopped is not None:
            raise Backpressure(f"{stopped} ({stored} of {len(items)} blocks stored; send the "
                               "rest)", stopped.retry_after, stored) from stopped
        return stored

    def _placed(self, nid: int, data: Pieces, seg: OpenSegment, placed: layout.Entry
                ) -> BlockMeta:
        """A block the writer appended: into the index (and the DRAM tier), counted."""
        key = placed.key
        loc = Location(seg.info.seg_id, placed.offset, placed.length, placed.raw_length,
                       placed.crc, placed.codec, placed.written_at, placed.attrs)
        self.catalog.put(nid, key, loc)
        if self._fill_on_write:
            self.dram.put(nid, key, loc, frozen_copy(data))
        else:
            self.dram.invalidate(nid, key)
        self.stats.blocks_put += 1
        self.stats.bytes_accepted += placed.raw_length
        self.stats.bytes_stored += placed.length
        return BlockMeta(key, placed.raw_length, placed.crc, placed.written_at, placed.codec,
                         placed.attrs)

    async def wait_durable(self, namespace: str, keys: Sequence[bytes]) -> None:
        """Wait until these blocks' segments are on the backend (BackendUnavailable: one failed)."""
        nid = self.ns_id(namespace)
        segments = set()
        for key in keys:
            loc = self.index.get(nid, key)
            if loc is None:
                raise BackendUnavailable(f"block {key[:80]!r} was lost before it was sealed")
            seg = self.writer.in_memory(loc.segment)
            if seg is not None:
                segments.add(seg)
        for seg in segments:
            await seg.on_backend()

    async def rewrite(self, namespace: str, key: bytes, data: Block, old: Location) -> int:
        """Compaction: append a live block again, and index it there unless it changed
        meanwhile (the newer write stands). Returns the segment it was appended to."""
        nid = self.ns_id(namespace)
        entry = layout.Entry(namespace, key, 0, old.length, old.raw_length, old.crc, old.codec,
                             old.written_at, attrs=old.attrs)  # the same block, as written
        seg, placed = await self.writer.append(entry, data)
        if self.index.get(nid, key) == old:
            self.catalog.put(nid, key, Location(seg.info.seg_id, placed.offset, old.length,
                                                old.raw_length, old.crc, old.codec,
                                                placed.written_at, old.attrs))
        return seg.info.seg_id

    async def evict_now(self) -> int:  # the eviction policy run once (tests and operations)
        return await self._evictor.run_once()

    async def delete(self, namespace: str, key: bytes) -> bool:
        """Delete a block: its tombstone first, also for a key not held here (a replica's write
        not synced yet stays deleted), then its index entry unless a write placed after the
        tombstone replaced it (False: none removed). Raises Backpressure or BackendError (503:
        retry) if the tombstone cannot be appended (the block stays)."""
        nid = self.ns_id(namespace)
        placed = (await self.writer.append(layout.tombstone_for(namespace, key), b""))[1]
        self.catalog.deletes.note(namespace, key, placed.written_at)  # for syncs (deletes.py)
        old = self.index.get(nid, key)
        if old is None or old.written_at > placed.written_at:
            return False  # deleted meanwhile, or written again after the tombstone
        self.catalog.remove(nid, key)
        self.dram.invalidate(nid, key)
        self.stats.deletes += 1
        return True

    def _segment_failed(self, info: SegmentInfo, exc: BaseException) -> None:
        self.stats.blocks_lost += self.catalog.forget_segment(info.seg_id)
        self._fullness.failed(exc)  # out of room: evict to a budget, not probe

    # ---- reads --------------------------------------------------------------------------
    def head(self, namespace: str, key: bytes) -> BlockMeta | None:
        loc = self.index.get(self.ns_id(namespace), key)
        return None if loc is None else BlockMeta(key, loc.raw_length, loc.crc, loc.written_at,
                                                  loc.codec, loc.attrs)

    async def get(self, namespace: str, key: bytes) -> Block | None:
        """The block's bytes, or None on a miss (absent, evicted, corrupt, backend down)."""
        return (await self.get_many(namespace, [key]))[0]

    def read_now(self, namespace: str, key: bytes) -> Pieces | None:  # None: ask read()
        return self.fetcher.read_now(self.ns_id(namespace), key)  # no wait needed (fetch.py)

    def read(self, namespace: str, key: bytes, *, span: int = 0) -> Awaitable[Pieces | None]:
        """As :meth:`get`, in the pieces the store holds it in (no join: for sending): the
        version the index holds when this is called (a :meth:`head` just before names it),
        even if the key is written again before the bytes come. ``span``: bytes of a range
        the caller sends; such reads share one (shared_reads)."""
        nid = self.ns_id(namespace)
        loc = self.index.get(nid, key)
        load = functools.partial(self.fetcher.read_one, nid, key, loc)
        return self.shared_reads.read((nid, key, loc), span, load) if loc and span else load()

    async def get_many(self, namespace: str, keys: Sequence[bytes], *,
                       decode: bool = True) -> list[Block | None]:
        """Several blocks, each as one buffer (``decode=False``: stored bytes, for compaction);
        for a long chain, :meth:`iter_many` (this holds every block until it returns)."""
        return await self.fetcher.get_many(self.ns_id(namespace), keys, decode=decode)

    def iter_many(self, namespace: str, keys: Sequence[bytes], *,
                  decode: bool = True) -> AsyncGenerator[Pieces | None, None]:
        """The blocks in request order as they arrive (None: a miss; a DRAM-tier hit may be the
        pieces it was written in), read a bounded window ahead (fetch.py); ``aclosing`` it."""
        return self.fetcher.iter_many(self.ns_id(namespace), keys, decode=decode)

    def iter_unverified(self, ns: str, keys: Sequence[bytes]) -> AsyncGenerator[Sendable, None]:
        return self.fetcher.iter_unverified(self.ns_id(ns), keys)  # unverified.py

    async def list_blocks(self, namespace: str, prefix: bytes = b"", start_after: bytes = b"",
                          limit: int = 1000, delimiter: bytes = b""
                          ) -> tuple[list[BlockMeta | bytes], bool]:
        """:func:`listing.page` (the loop runs meanwhile): blocks in key order, and common
        prefixes (bytes) with a ``delimiter``; and whether more follow."""
        rows, more = await listing.page(self.index, self.ns_id(namespace), prefix, start_after,
                                        limit, delimiter)
        return [k if c is None else BlockMeta(k, c.raw_length, c.crc, c.written_at, c.codec,
                                              c.attrs) for k, c in rows], more

    def prefix_lookup(self, namespace: str, keys: Sequence[bytes]) -> tuple[int, list[bool]]:
        """How many leading keys are present, and which keys are present."""
        nid = self.ns_id(namespace)
        present = [self.index.get(nid, k) is not None for k in keys]
        leading = next((i for i, p in enumerate(present) if not p), len(present))
        return leading, present

    def summary(self) -> dict[str, float]:
        out = self.stats.as_dict()
        sealed = [s for s in self.segments.all() if s.state is SegmentState.SEALED]
        w = self.writer
        out.update(index_entries=len(self.index), index_bytes=self.index.memory_bytes(),
                   open_segments=w.open_segments, open_segment_bytes=w.memory_bytes(),
                   uploads_paced=w.uploads_paced, read_memory=self.fetcher.read_memory,
                   sealed_segments=len(sealed), sealed_bytes=sum(s.length for s in sealed),
                   dram_bytes=self.dram.size, shared_range_reads=self.shared_reads.shared,
                   shared_read_bytes=self.shared_reads.held_bytes,
                   namespaces=len(self.namespaces), capacity_bytes=float(self._evictor.capacity),
                   backend_healthy=1.0 if w.health.healthy else 0.0)
        return out
