"""Namespace records on the backend: what every start and every replica learns namespaces from.

A live namespace has a record, ``PREFIX namespaces/<name>.json`` (its name, codec and creation
time), written before the namespace is used. Deleting one writes a marker first,
``PREFIX deleted-namespaces/<name>/<stamp>`` (the key says when: a listing tells every replica
every deletion without a GET), then removes the record and the name's older markers.

A marker newer than a namespace's record deletes it, on every replica at its next scan and at
every start. Once a name has a marker, its entries count only if stamped after the creation of
the namespace that now holds the name: none while it stays deleted, and a namespace created
anew under the name starts empty, without the old one's blocks or the writes another replica
took into the old one before it learnt of the deletion (the deletion wins, as one S3
bucket's would), but those stamped after the creation anew. A record that merely goes
missing deletes nothing: a backend that lost its data loses every record too
(docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Collection, Mapping
from typing import NamedTuple

from s3kv.backends.base import Backend
from s3kv.errors import BackendError, InvalidInput
from s3kv.log import get_logger
from s3kv.retry import RetryPolicy
from s3kv.store.codecs import CodecSpec, parse_codec_spec
from s3kv.store.stamps import Stamps

log = get_logger(__name__)

RECORDS = "namespaces/"
MARKERS = "deleted-namespaces/"
#: records read at once at start
READ_CONCURRENCY = 16


class NamespaceRecord(NamedTuple):
    name: str
    codec: CodecSpec
    created_at: float


class NamespaceRecords:
    """The records and deletion markers of one store's namespaces, on its backend."""

    def __init__(self, backend: Backend, prefix: str, retry: RetryPolicy,
                 stamps: Stamps | None = None) -> None:
        """``stamps``: the creations' and deletions' (the catalog's: stamps.py)."""
        self.backend = backend
        self.prefix = prefix
        self.retry = retry
        self.stamps = stamps or Stamps()

    def record_key(self, name: str) -> str:
        return f"{self.prefix}{RECORDS}{name}.json"

    def _markers_of(self, name: str) -> str:
        return f"{self.prefix}{MARKERS}{name}/"

    async def create(self, name: str, codec: CodecSpec) -> tuple[float, int]:
        """Write a new namespace's record; returns its creation time and the bytes written."""
        created = self.stamps.next()
        record = json.dumps({"name": name, "codec": codec.render(),
                             "created_at": created}).encode()
        await self.retry.run(lambda: self.backend.put_object(self.record_key(name), record))
        return created, len(record)

    async def delete(self, name: str) -> float:
        """Record the namespace's deletion; returns its stamp. Once the marker is written the
        namespace is deleted (raises before that, BackendError, and nothing changed); its
        record and older markers are then removed as far as the backend lets (what stays is
        superseded by the marker)."""
        stamp = round(self.stamps.next(), 6)  # after every stamp seen (stamps.py)
        body = json.dumps({"name": name, "deleted_at": stamp}).encode()
        await self.retry.run(lambda: self.backend.put_object(
            f"{self._markers_of(name)}{stamp:.6f}", body))
        try:
            older = [o.key for o in await self.backend.list_objects(self._markers_of(name))
                     if _stamp_of(o.key) not in (None, stamp)]
            await self.retry.run(lambda: self.backend.delete_objects(
                [self.record_key(name), *older]))
        except BackendError as exc:
            log.warning("namespace.record_left", namespace=name, error=str(exc))
        return stamp

    async def deletions(self) -> dict[str, float]:
        """Every deleted name's latest deletion stamp, from one listing."""
        out: dict[str, float] = {}
        start = f"{self.prefix}{MARKERS}"
        for obj in await self.backend.list_objects(start):
            name, _, _ = obj.key[len(start):].partition("/")
            stamp = _stamp_of(obj.key)
            if stamp is None:
                log.warning("namespace.marker_unreadable", key=obj.key)
            elif stamp > out.get(name, float("-inf")):
                out[name] = stamp
        return out

    async def read(self, known: Collection[str] = (),
                   deleted: Mapping[str, float] | None = None) -> list[NamespaceRecord]:
        """The records on the backend but those of the ``known`` names and those no newer than
        their name's deletion in ``deleted`` (left by a deletion cut short)."""
        start = f"{self.prefix}{RECORDS}"
        keys = [o.key for o in await self.backend.list_objects(start)
                if o.key[len(start):].removesuffix(".json") not in known]
        slots = asyncio.Semaphore(READ_CONCURRENCY)

        async def one(key: str) -> NamespaceRecord | None:
            try:
                async with slots:
                    doc = json.loads(await self.backend.get_object(key))
                return NamespaceRecord(str(doc["name"]),
                                       parse_codec_spec(str(doc.get("codec", "none"))),
                                       float(doc.get("created_at", 0.0)))
            except (ValueError, KeyError, TypeError, BackendError, InvalidInput) as exc:
                log.warning("namespace.unreadable", key=key, error=str(exc))
                return None

        gone = deleted or {}
        return [r for r in await asyncio.gather(*(one(k) for k in keys))
                if r is not None and r.created_at > gone.get(r.name, float("-inf"))]


def _stamp_of(key: str) -> float | None:
    with contextlib.suppress(ValueError):
        return round(float(key.rpartition("/")[2]), 6)
    return None
