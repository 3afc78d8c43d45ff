"""The segment table: what the store knows about each segment object, by a small integer id."""

from __future__ import annotations

import enum
import math
import os
import socket
import time
from dataclasses import dataclass, field


class SegmentState(enum.Enum):
    OPEN = "open"  # accepting blocks, in memory
    SEALING = "sealing"  # manifest appended, upload completing, still served from memory
    SEALED = "sealed"  # complete on the backend
    FAILED = "failed"  # upload failed; its blocks were dropped from the index
    EVICTING = "evicting"  # being deleted: reads of it are misses, not backend GETs


@dataclass
class SegmentInfo:
    seg_id: int
    name: str  # relative to the store prefix, e.g. node-a/0190c3e2a1b-00000007
    state: SegmentState
    created_at: float = field(default_factory=time.time)
    sealed_at: float = 0.0
    length: int = 0  # object bytes on the backend once sealed
    block_bytes: int = 0  # stored bytes of every block ever written into it
    live_bytes: int = 0  # stored bytes of blocks the index still points to
    # blocks (tombstones are not) ever written into it and those the index still points to:
    # counted apart from the bytes, since an empty block (an S3 directory marker, an empty
    # object) is live with no bytes
    blocks: int = 0
    live_blocks: int = 0
    last_access: float = 0.0  # last read (or seal), for coldest-first eviction
    own: bool = True  # written by this store instance
    # the written_at range of its entries, tombstones included (a compaction rewrite keeps
    # its block's: a segment can hold entries older than itself): what deleting it may
    # uncover (carry.py)
    oldest: float = math.inf
    newest: float = 0.0
    dead_at: float = 0.0  # when its last live block died (``dead``), no earlier than its killer

    def saw(self, written_at: float) -> None:
        """An entry stamped ``written_at`` is in the segment."""
        self.oldest = min(self.oldest, written_at)
        self.newest = max(self.newest, written_at)

    def added(self, size: int) -> None:
        """A block of ``size`` stored bytes was written into the segment."""
        self.blocks += 1
        self.block_bytes += size

    def gained(self, size: int) -> None:
        """The index points to a block of ``size`` bytes in the segment."""
        self.live_blocks += 1
        self.live_bytes += size

    def lost(self, size: int) -> None:
        """The index no longer points to a block of ``size`` bytes in the segment."""
        self.live_blocks -= 1
        self.live_bytes -= size
        if self.dead:
            self.dead_at = time.time()

    @property
    def dead(self) -> bool:
        """It held blocks and none is live any more (empty ones count as live)."""
        return self.blocks > 0 and self.live_blocks <= 0

    @property
    def live_ratio(self) -> float:
        """Of its blocks' bytes, the share still live (1.0 with none: nothing to win back)."""
        return self.live_bytes / self.block_bytes if self.block_bytes else 1.0


def default_node_id() -> str:
    """This host's name (made safe for a key) and a random suffix: segment names' first part."""
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"{host[:40] or 'node'}-{os.urandom(3).hex()}"


def segment_key(prefix: str, name: str) -> str:
    return f"{prefix}segments/{name}.seg"


def sidecar_key(prefix: str, name: str) -> str:
    return f"{prefix}manifests/{name}.mf"


def name_from_key(key: str, prefix: str, kind: str) -> str | None:
    """Inverse of segment_key/sidecar_key (kind ``segments`` or ``manifests``)."""
    head = f"{prefix}{kind}/"
    suffix = ".seg" if kind == "segments" else ".mf"
    if not key.startswith(head) or not key.endswith(suffix):
        return None
    return key[len(head):-len(suffix)]


class SegmentTable:
    def __init__(self) -> None:
        self._by_id: dict[int, SegmentInfo] = {}
        self._by_name: dict[str, int] = {}
        self._next = 1

    def add(self, name: str, state: SegmentState, *, own: bool = True) -> SegmentInfo:
        if name in self._by_name:
            return self._by_id[self._by_name[name]]
        info = SegmentInfo(self._next, name, state, own=own)
        self._next += 1
        self._by_id[info.seg_id] = info
        self._by_name[name] = info.seg_id
        return info

    def get(self, seg_id: int) -> SegmentInfo | None:
        return self._by_id.get(seg_id)

    def by_name(self, name: str) -> SegmentInfo | None:
        sid = self._by_name.get(name)
        return None if sid is None else self._by_id[sid]

    def remove(self, seg_id: int) -> SegmentInfo | None:
        info = self._by_id.pop(seg_id, None)
        if info is not None:
            self._by_name.pop(info.name, None)
        return info

    def sealed(self) -> list[SegmentInfo]:
        return [s for s in self._by_id.values() if s.state is SegmentState.SEALED]

    def all(self) -> list[SegmentInfo]:
        return list(self._by_id.values())

    def names(self) -> set[str]:
        return set(self._by_name)

    def sealed_bytes(self) -> int:
        return sum(s.length for s in self._by_id.values() if s.state is SegmentState.SEALED)
