"""The store's catalog: what is where.

The block index (namespace id, key) -> location, the segment table, the namespaces (name -> id,
codec, creation time) and the live bytes of each segment: a block overwritten or deleted is
dead in its segment, which eviction reads to find segments worth dropping or compacting.

:class:`~s3kv.store.store.BlockStore` composes one; the background jobs (recovery, eviction)
and the fetcher work on it through these methods and never on the store itself.
"""

from __future__ import annotations

import math
import re

from s3kv.errors import InvalidNamespace, NamespaceNotFound, TooManyNamespaces
from s3kv.store.codecs import CodecSpec
from s3kv.store.deletes import RecentDeletes
from s3kv.store.index import MAX_NAMESPACE_ID, BlockIndex, Location
from s3kv.store.segments import SegmentTable
from s3kv.store.stamps import Stamps

_NS_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def validate_namespace(name: str) -> None:
    """Raise InvalidNamespace unless ``name`` is a valid bucket name (as S3's rules)."""
    if not _NS_RE.match(name) or ".." in name or "-." in name or ".-" in name:
        raise InvalidNamespace(
            f"invalid namespace (bucket) name {name!r}: 3-63 lowercase letters, digits, dots "
            "and hyphens, starting and ending with a letter or digit")


class Catalog:
    def __init__(self, deletes_window: float = 60.0) -> None:
        """``deletes_window``: seconds a write may take to reach the other replicas: the
        deletes seen are kept that long for replica sync (deletes.py)."""
        self.index = BlockIndex()
        self.segments = SegmentTable()
        self.namespaces: dict[str, int] = {}
        self.namespace_codecs: dict[str, CodecSpec] = {}
        self.namespace_created: dict[str, float] = {}
        #: each deleted name's latest deletion (s3kv/store/namespaces.py)
        self.deleted: dict[str, float] = {}
        #: keys deleted lately, by their tombstones' stamps (deletes.py)
        self.deletes = RecentDeletes(deletes_window)
        #: the stamps of entries, namespace records and deletions (stamps.py)
        self.stamps = Stamps()
        #: per segment, the (namespace id, key) of its blocks the index forgot as corrupt:
        #: their entries still hide older ones when it goes (carry.py)
        self.lost: dict[int, set[tuple[int, bytes]]] = {}
        self._top = 0  # the highest namespace id given out

    # ---- namespaces ---------------------------------------------------------------------
    def ns_id(self, name: str) -> int:
        nid = self.namespaces.get(name)
        if nid is None:
            raise NamespaceNotFound(f"namespace {name!r} does not exist")
        return nid

    def register_namespace(self, name: str, codec: CodecSpec | None = None,
                           created_at: float = 0.0) -> int:
        """The namespace's id, registering it first if it is new (at start, from its record
        or from the first entry that names it)."""
        self.stamps.saw(created_at)
        if name not in self.namespaces:
            self.namespaces[name] = nid = self.free_id()
            self._top = max(self._top, nid)
            self.namespace_codecs[name] = codec or CodecSpec()
            self.namespace_created[name] = created_at
        return self.namespaces[name]

    def free_id(self) -> int:
        """The id a new namespace gets: one past the highest given out while that fits the
        index, else the least one not in use (a dropped namespace's: it has no blocks left)."""
        if self._top < MAX_NAMESPACE_ID:
            return self._top + 1
        used = set(self.namespaces.values())
        free = next((i for i in range(1, MAX_NAMESPACE_ID + 1) if i not in used), None)
        if free is None:
            raise TooManyNamespaces(f"the gateway holds {len(used)} namespaces, as many as it "
                                    "can: delete one first")
        return free

    def drop_namespace(self, name: str) -> int:
        """Forget a namespace (its blocks must be gone); returns the id it had."""
        nid = self.namespaces.pop(name)
        self.namespace_codecs.pop(name, None)
        self.namespace_created.pop(name, None)
        return nid

    def hides(self, name: str, written_at: float) -> bool:
        """Whether an entry of namespace ``name`` stamped ``written_at`` belongs to a deleted
        namespace: the name was deleted, and it either stays deleted or was created anew
        after the entry (which another replica took before it learnt of the deletion)."""
        if name not in self.deleted:
            return False
        created = self.namespace_created.get(name)
        return created is None or written_at < created

    def delete_namespace(self, name: str, stamp: float,
                         anew: tuple[float, CodecSpec] | None = None) -> int | None:
        """A deletion stamped ``stamp`` became known: a namespace created before it goes with
        every block it holds; if the name was created anew since (``anew``: when, with which
        codec), the namespace becomes that one, with the blocks stamped after its creation
        (as every start keeps them: :meth:`hides`). Returns the id it had (None: nothing went)."""
        self.stamps.saw(stamp)
        self.deleted[name] = max(stamp, self.deleted.get(name, stamp))
        if name not in self.namespaces or self.namespace_created[name] >= stamp:
            return None
        nid = self.namespaces[name]
        since = math.inf if anew is None else anew[0]
        for e in self.index.live_entries(nid):
            held = self.index.entry(int(e))
            if held is not None and held[2].written_at < since:
                self.remove(nid, held[1])
        if anew is None:
            return self.drop_namespace(name)
        self.stamps.saw(anew[0])
        self.namespace_created[name], self.namespace_codecs[name] = anew
        return nid

    # ---- blocks -------------------------------------------------------------------------
    def put(self, nid: int, key: bytes, loc: Location) -> None:
        """Point the key at ``loc``; what it pointed at before is dead."""
        old = self.index.put(nid, key, loc)
        if old is not None:
            self.dead(old)
        info = self.segments.get(loc.segment)
        if info is not None and not info.own:
            info.gained(loc.length)

    def remove(self, nid: int, key: bytes) -> Location | None:
        """Drop the key; its block is dead. Returns where it was (None: it was absent)."""
        old = self.index.remove(nid, key)
        if old is not None:
            self.dead(old)
        return old

    def lose(self, nid: int, key: bytes, loc: Location) -> None:
        """The block at ``loc`` (the key's now) failed its checksum: the key is dropped, and
        remembered as its segment's until the segment goes."""
        if self.index.get(nid, key) == loc:
            self.remove(nid, key)
            self.lost.setdefault(loc.segment, set()).add((nid, key))

    def dead(self, loc: Location) -> None:
        """The block at ``loc`` is no longer live in its segment."""
        info = self.segments.get(loc.segment)
        if info is not None:
            info.lost(loc.length)
            if info.dead:  # by stamps: what killed it is stamped no later (eviction.py)
                info.dead_at = max(info.dead_at, self.stamps.last)

    # ---- segments -----------------------------------------------------------------------
    def forget_segment(self, seg_id: int) -> int:
        """Drop a segment and every block it holds from the index (it is gone); returns
        how many blocks that was."""
        dropped = self.index.drop_segment(seg_id)
        self.segments.remove(seg_id)
        self.lost.pop(seg_id, None)
        return dropped
