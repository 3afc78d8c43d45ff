"""Rebuilding the index from manifests at start, and following other replicas' manifests.

At start: list the segment objects and the sidecar manifests; read each segment's sidecar (or,
when the sidecar is missing, its footer through the trailer); replay every entry in written_at
order, last writer wins, tombstones included. Unfinished multipart uploads of this node (a
crash) and stale ones of any node are aborted; sidecars whose segment is gone are removed.

While running: every ``sync_interval`` seconds, pick up the namespaces other replicas created
(an empty bucket too, with its codec), pick up segments other replicas sealed (and, from their
footers, those left without a sidecar by a writer that died between the two uploads), and drop
segments that disappeared (evicted elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Collection

from s3kv.backends.base import Backend, ObjectInfo
from s3kv.errors import (
    BackendError,
    IntegrityError,
    ObjectMissing,
    TooManyNamespaces,
)
from s3kv.log import get_logger
from s3kv.store import layout
from s3kv.store.catalog import Catalog
from s3kv.store.index import Location
from s3kv.store.namespaces import NamespaceRecords
from s3kv.store.segments import (
    SegmentState,
    name_from_key,
    segment_key,
    sidecar_key,
)

log = get_logger(__name__)

#: multipart uploads of other nodes older than this are considered orphans
ORPHAN_AGE = 3600.0
LOAD_CONCURRENCY = 16


async def read_manifest(backend: Backend, prefix: str, name: str, size: int,
                        has_sidecar: bool = True) -> tuple[layout.Manifest, bytes | None]:
    """A segment's manifest: its sidecar's, or its footer's (through the trailer) when the
    sidecar is missing or bad; and, in that case, the bytes a new sidecar would hold. Raises
    IntegrityError if neither can be read, BackendError if the backend cannot be."""
    if has_sidecar:
        try:
            data = await backend.get_object(sidecar_key(prefix, name))
            manifest = layout.Manifest.decode(data)
            layout.check_manifest(manifest, name, size, len(data))
            return manifest, None
        except IntegrityError as exc:
            log.warning("manifest.sidecar_bad", segment=name, error=str(exc))
        except ObjectMissing:  # gone since it was listed: the footer has the same
            pass
    key = segment_key(prefix, name)
    if size < layout.TRAILER_SIZE:
        raise IntegrityError("segment shorter than a trailer")
    trailer = await backend.get_range(key, size - layout.TRAILER_SIZE, layout.TRAILER_SIZE)
    moff, mlen, mcrc = layout.decode_trailer(trailer)
    if moff + mlen + layout.TRAILER_SIZE != size:
        raise IntegrityError(f"trailer puts the manifest at {moff}, {mlen} bytes, in a segment "
                             f"of {size}")
    body = bytes(await backend.get_range(key, moff, mlen))  # keys: hashable
    if layout.checksum(body) != mcrc:
        raise IntegrityError("footer manifest checksum mismatch")
    manifest = layout.Manifest.decode(body)
    layout.check_manifest(manifest, name, size, mlen)
    return manifest, body


async def load_manifest(backend: Backend, prefix: str, name: str, size: int,
                        has_sidecar: bool) -> layout.Manifest | None:
    """:func:`read_manifest` at start: a missing sidecar is written anew (the next start is
    cheap); None if the manifest cannot be read (logged: the segment is skipped)."""
    try:
        manifest, sidecar = await read_manifest(backend, prefix, name, size, has_sidecar)
        if sidecar is not None:
            with contextlib.suppress(BackendError):
                await backend.put_object(sidecar_key(prefix, name), sidecar)
        return manifest
    except ObjectMissing:  # deleted since it was listed: another replica evicted it
        log.info("manifest.gone", segment=name)
        return None
    except (IntegrityError, BackendError) as exc:
        if isinstance(exc, BackendError) and exc.transient:
            # the backend is down: a segment not loaded is listed again at the next sync
            log.warning("manifest.unavailable", segment=name, error=str(exc))
        else:
            log.error("manifest.unreadable", segment=name, error=str(exc))
        return None


class Recovery:
    def __init__(self, backend: Backend, prefix: str, catalog: Catalog, node_id: str,
                 sync_interval: float, records: NamespaceRecords,
                 on_deleted: Callable[[int], None] = lambda nid: None,
                 bare_after: float = 60.0) -> None:
        """``node_id``: this node's (its unfinished uploads are a crash's); ``sync_interval``:
        seconds between looks at other replicas' segments (0: never); ``on_deleted``: called
        with the id of a namespace another replica deleted, once it is gone from the catalog;
        ``bare_after``: seconds a segment listed without its sidecar is given for it before a
        sync reads its footer (the sidecar's upload rides out an outage that long)."""
        self.backend = backend
        self.prefix = prefix
        self.catalog = catalog
        self.node_id = node_id
        self.sync_interval = sync_interval
        self.records = records
        self.on_deleted = on_deleted
        self.bare_after = bare_after
        self._bare: dict[str, float] = {}  # segments listed without a sidecar: first seen

    # ---- listing ------------------------------------------------------------------------
    async def _list(self, kind: str) -> dict[str, ObjectInfo]:
        out: dict[str, ObjectInfo] = {}
        for obj in await self.backend.list_objects(f"{self.prefix}{kind}/"):
            name = name_from_key(obj.key, self.prefix, kind)
            if name is not None:
                out[name] = obj
        return out

    async def _load_all(self, names: list[str], segs: dict[str, ObjectInfo],
                        sidecars: set[str]) -> list[layout.Manifest]:
        slots = asyncio.Semaphore(LOAD_CONCURRENCY)

        async def one(name: str) -> layout.Manifest | None:
            async with slots:
                return await load_manifest(self.backend, self.prefix, name, segs[name].size,
                                           name in sidecars)

        loaded = await asyncio.gather(*(one(n) for n in names))
        return [m for m in loaded if m is not None]

    # ---- applying -----------------------------------------------------------------------
    def _apply(self, manifests: list[layout.Manifest]) -> int:
        """Register segments and replay their entries, last writer wins. Returns entries."""
        cat = self.catalog
        stream: list[tuple[float, int, layout.Entry]] = []
        newest = 0.0
        for m in manifests:
            info = cat.segments.add(m.segment, SegmentState.SEALED, own=False)
            info.length = m.segment_length
            info.sealed_at = info.last_access = info.created_at = m.created_at
            sizes = [e.length for e in m.entries if not e.tombstone]
            info.blocks, info.block_bytes = len(sizes), sum(sizes)
            if m.entries:  # the range of its stamps, in C (a call per entry: 4x the time)
                stamps = [e.written_at for e in m.entries]
                info.saw(min(stamps))
                info.saw(max(stamps))
                newest = max(newest, info.newest)
            stream.extend((e.written_at, info.seg_id, e) for e in m.entries)
        stream.sort(key=lambda t: (t[0], t[1]))
        cat.stamps.saw(newest)  # this store's next writes come after them (stamps.py)
        lost: set[str] = set()
        for _, seg_id, e in stream:
            if cat.hides(e.namespace, e.written_at):  # of a deleted namespace
                continue
            try:
                nid = cat.register_namespace(e.namespace)
            except TooManyNamespaces:  # more than the index holds (replicas created them)
                if e.namespace not in lost:
                    lost.add(e.namespace)
                    log.warning("namespace.no_room", namespace=e.namespace)
                continue
            current = cat.index.get(nid, e.key)
            if current is not None and current.written_at >= e.written_at:
                continue
            if e.tombstone:
                cat.deletes.note(e.namespace, e.key, e.written_at)
                if current is not None:
                    cat.remove(nid, e.key)
                continue
            if current is None and cat.deletes.hides(e.namespace, e.key, e.written_at):
                continue  # deleted after it was written (a sync: deletes.py)
            cat.put(nid, e.key, Location(seg_id, e.offset, e.length, e.raw_length, e.crc,
                                         e.codec, e.written_at, e.attrs))
        return len(stream)

    # ---- start --------------------------------------------------------------------------
    async def rebuild(self) -> None:
        started = time.monotonic()
        for name, stamp in (await self.records.deletions()).items():
            self.catalog.deleted[name] = stamp
            self.catalog.stamps.saw(stamp)
        await self._load_namespaces()
        recorded = set(self.catalog.namespaces)
        # sidecars first: a segment completes before its sidecar is written, so one listed
        # before the segments whose segment is not listed is stale (listed after them, it
        # was a replica's segment sealed meanwhile, invisible to syncs once deleted)
        sidecars = await self._list("manifests")
        segs = await self._list("segments")
        stale = [n for n in sidecars if n not in segs]
        if stale:
            with contextlib.suppress(BackendError):
                await self.backend.delete_objects([sidecar_key(self.prefix, n) for n in stale])
        manifests = await self._load_all(sorted(segs), segs, set(sidecars))
        entries = self._apply(manifests)
        self._forget_deleted(recorded)
        await self._abort_orphans()
        log.info("store.recovered", segments=len(manifests), entries=entries,
                 blocks=len(self.catalog.index), stale_sidecars=len(stale),
                 seconds=round(time.monotonic() - started, 3))

    def _forget_deleted(self, recorded: set[str]) -> None:
        """A namespace that only entries name (no record) and that holds no block was deleted:
        its blocks' old entries do not bring it back. One with blocks is kept (a store written
        before namespaces had records)."""
        for name, nid in list(self.catalog.namespaces.items()):
            if name not in recorded and not self.catalog.index.count_namespace(nid):
                self.catalog.drop_namespace(name)
                log.info("namespace.deleted_earlier", namespace=name)

    async def _load_namespaces(self, known: Collection[str] = ()) -> None:
        """Register the namespaces whose records are on the backend, but the ``known`` ones
        and those deleted since their record was written."""
        for r in await self.records.read(known, self.catalog.deleted):
            try:
                self.catalog.register_namespace(r.name, r.codec, r.created_at)
            except TooManyNamespaces as exc:
                log.warning("namespace.no_room", namespace=r.name, error=str(exc))

    async def _learn_deletions(self) -> None:
        """Drop the namespaces other replicas deleted (with every block held in them), but
        the blocks stamped after the name's creation anew, if it was (catalog.py)."""
        cat = self.catalog
        deletions = await self.records.deletions()
        learnt = {n: s for n, s in deletions.items() if s > cat.deleted.get(n, float("-inf"))}
        if not learnt:
            return
        anew = {r.name: (r.created_at, r.codec) for r in await self.records.read(
            set(cat.namespaces) - set(learnt), deletions)}
        for name, stamp in learnt.items():
            nid = cat.delete_namespace(name, stamp, anew.get(name))
            if nid is not None:
                self.on_deleted(nid)
                log.info("namespace.deleted_elsewhere", namespace=name, anew=name in anew)

    async def _abort_orphans(self) -> None:
        own = f"{self.prefix}segments/{self.node_id}/"
        now = time.time()
        try:
            uploads = await self.backend.list_multipart_uploads(f"{self.prefix}segments/")
        except BackendError as exc:
            log.warning("recovery.list_uploads_failed", error=str(exc))
            return
        for up in uploads:
            if up.key.startswith(own) or now - up.initiated > ORPHAN_AGE:
                with contextlib.suppress(BackendError):
                    await self.backend.abort_multipart(up.key, up.upload_id)
                    log.info("recovery.orphan_aborted", key=up.key)

    # ---- running ------------------------------------------------------------------------
    async def sync_once(self) -> int:
        """Load segments sealed by other replicas, forget vanished ones. Returns new segments."""
        cat = self.catalog
        listed_at = time.time()
        # namespaces other replicas deleted (a marker), then those they created, with their
        # codecs; one whose record merely went stays served (a backend that lost its data
        # loses every record: docs/reliability.md), and the next start forgets it if it holds
        # no block
        await self._learn_deletions()
        await self._load_namespaces(set(cat.namespaces))
        segs = await self._list("segments")
        sidecars = await self._list("manifests")
        known = cat.segments.names()
        for info in cat.segments.sealed():
            if info.name not in segs and info.sealed_at < listed_at:
                dropped = cat.forget_segment(info.seg_id)
                log.info("segment.vanished", segment=info.name, blocks=dropped)
        # segments whose sidecar exists, and those listed without one for ``bare_after``:
        # their writer died (kill -9) or failed between the segment's upload and the
        # sidecar's, and no running replica would ever see their blocks, nor evict them
        now = time.monotonic()
        self._bare = {n: self._bare.get(n, now) for n in segs
                      if n not in known and n not in sidecars}
        new = sorted(n for n in segs if n not in known and (
            n in sidecars or now - self._bare[n] >= self.bare_after))
        if new:
            self._apply(await self._load_all(new, segs, set(sidecars)))
            log.info("store.synced", segments=len(new))
        return len(new)

    async def sync_loop(self) -> None:
        interval = self.sync_interval
        if interval <= 0:
            return
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sync_once()
            except BackendError as exc:
                log.warning("store.sync_failed", error=str(exc))
