"""Where a client may read a block itself: the direct reads of the native API's ``locate``.

A restore through the gateway costs its node a receive, a checksum and a send per byte, on top
of what the object store spends serving the ranged GET. A block that sits in a sealed segment
of a backend that signs URLs (the S3 backend), stored as written (no codec) and not held by the
DRAM tier, can instead be read by the client with a ranged GET of the segment object under a
presigned URL, and checked against the CRC the index holds: the gateway answers where, the
object store serves the bytes. Every other block (open or sealing segments, the DRAM tier,
a codec to undo, a backend without URLs) is read through the gateway as before.

A located block is a read like any other for eviction (its segment's last access, the index's
recency); a segment evicted after ``locate`` answered is a 404 for the client, which then asks
the gateway (a miss). Segment names are never reused, so a URL never reads another segment.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from s3kv.backends.base import Backend, Presigner
from s3kv.store.catalog import Catalog
from s3kv.store.codecs import NONE_ID
from s3kv.store.dram import DramCache
from s3kv.store.segments import SegmentState, segment_key
from s3kv.store.stats import StoreStats
from s3kv.store.writer import SegmentWriter

#: a key to read through the gateway's batch get
VIA_GATEWAY = "gateway"


@dataclass
class Located:
    """Answer to ``locate``: the URLs of the segments named, and per key None (absent),
    ``VIA_GATEWAY``, or (index into ``urls``, offset, length, CRC-32) of its bytes."""

    expires: float  # epoch seconds after which the URLs are refused
    urls: list[str] = field(default_factory=list)
    blocks: list[tuple[int, int, int, int] | str | None] = field(default_factory=list)


class Locator:
    def __init__(self, backend: Backend, prefix: str, catalog: Catalog, dram: DramCache,
                 writer: SegmentWriter, stats: StoreStats) -> None:
        #: the backend, if it signs URLs (decided once: a runtime protocol's isinstance walks
        #: its members on every call)
        self._signer = cast(Presigner, backend) if isinstance(backend, Presigner) else None
        self._prefix = prefix
        self._catalog = catalog
        self._dram = dram
        self._writer = writer
        self._stats = stats

    @property
    def possible(self) -> bool:
        """Whether this store's backend can sign URLs for its segments at all."""
        return self._signer is not None

    async def locate(self, nid: int, keys: Sequence[bytes], expires: int, *,
                     urls: bool = True) -> Located:
        """Where each key's bytes are; URLs valid ``expires`` seconds. ``urls=False``: none
        (every present block ``VIA_GATEWAY``: a segment holds blocks of several namespaces,
        so its URL is only for a caller that may read them all)."""
        index, segments = self._catalog.index, self._catalog.segments
        now = time.time()
        out = Located(now + expires)
        url_of: dict[int, int] = {}
        signer = self._signer if urls else None
        for key in keys:
            loc = index.get(nid, key)
            if loc is None:
                out.blocks.append(None)
                continue
            info = segments.get(loc.segment)
            if (signer is None or info is None or info.state is not SegmentState.SEALED
                    or loc.codec != NONE_ID or not loc.length  # empty: nothing to read
                    or self._writer.holds(loc.segment)
                    or (self._dram.enabled and self._dram.get(nid, key, loc) is not None)):
                out.blocks.append(VIA_GATEWAY)
                continue
            slot = url_of.get(loc.segment)
            if slot is None:
                url = await signer.presign_get(segment_key(self._prefix, info.name), expires)
                if url is None:
                    out.blocks.append(VIA_GATEWAY)
                    continue
                slot = url_of[loc.segment] = len(out.urls)
                out.urls.append(url)
                info.last_access = now
            index.touch(nid, key)
            self._stats.direct_located += 1
            out.blocks.append((slot, loc.offset, loc.length, loc.crc))
        return out
