"""The multipart uploads in progress at the gateway, their staged parts and their idleness.

Parts are held in memory within the memory budget (state.MemoryBudget) until their upload is
completed or dropped. An upload idle for ``UPLOAD_TTL`` seconds is dropped at the next
CreateMultipartUpload, and one idle for ``UPLOAD_GRACE`` seconds is dropped as soon as the
budget is short (:meth:`Uploads.reclaim`, which the budget calls before it refuses a body): a
client that died between its parts and its Complete (a crashed or preempted pod) no longer
holds up to ``max_block_size`` of the budget for an hour, every write meanwhile answered with
503 SlowDown.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway.objattrs import ObjectAttrs
from s3kv.gateway.requests import Target, validate_key
from s3kv.gateway.state import GatewayState
from s3kv.log import get_logger
from s3kv.store.codecs import CodecSpec

log = get_logger(__name__)

#: seconds an upload may be idle (no part arriving, no Complete) before it is dropped
UPLOAD_TTL = 3600.0
#: seconds idle after which an upload's staged parts give way when the memory budget is short
UPLOAD_GRACE = 30.0
#: completed uploads remembered for a repeated Complete (each costs a few hundred bytes)
COMPLETED_MEMORY = 1024


@dataclass
class Part:
    data: bytes
    etag: str  # quoted
    reserved: int  # memory budget held
    checksum: str | None = None  # base64 digest in the upload's checksum algorithm
    at: float = field(default_factory=time.time)  # when it was uploaded (ListParts)


@dataclass
class Upload:
    bucket: str
    key: bytes
    codec: CodecSpec | None = None  # declared at CreateMultipartUpload
    attrs: ObjectAttrs = field(default_factory=ObjectAttrs)  # content headers, user metadata
    algorithm: str | None = None  # x-amz-checksum-algorithm, lower case
    checksum_type: str = "COMPOSITE"
    initiated: float = field(default_factory=time.time)  # ListMultipartUploads' Initiated
    parts: dict[int, Part] = field(default_factory=dict)
    last: float = field(default_factory=time.monotonic)  # when it was last worked on
    busy: int = 0  # parts arriving and Completes running now
    dropped: bool = False  # aborted, or dropped idle
    #: held by a Complete while it runs: a second Complete (a retry) and an Abort wait for
    #: its outcome (the first answer again; NoSuchUpload once it completed)
    finishing: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def size(self) -> int:
        return sum(len(p.data) for p in self.parts.values())

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """A part arriving or a Complete running: the upload is not idle meanwhile."""
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
            self.last = time.monotonic()

    def checksum_headers(self) -> dict[str, str]:
        if self.algorithm is None:
            return {}
        return {"x-amz-checksum-algorithm": self.algorithm.upper(),
                "x-amz-checksum-type": self.checksum_type}


@dataclass(frozen=True)
class Completed:
    bucket: str
    key: bytes
    body: bytes
    headers: dict[str, str]


class Uploads:
    def __init__(self) -> None:
        self.active: dict[str, Upload] = {}
        self.completed: OrderedDict[str, Completed] = OrderedDict()

    def get(self, upload_id: str, t: Target) -> Upload:
        up = self.active.get(upload_id)
        if up is None or up.bucket != t.bucket or up.key != validate_key(t.key):
            raise RequestError("NoSuchUpload", "The specified multipart upload does not exist.",
                               404)
        return up

    def drop(self, upload_id: str, st: GatewayState) -> int:
        """Forget the upload and give its parts' memory back; the bytes released."""
        up = self.active.pop(upload_id, None)
        if up is None:
            return 0
        up.dropped = True
        held = sum(part.reserved for part in up.parts.values())
        st.budget.release(held)
        return held

    def drop_bucket(self, bucket: str, st: GatewayState) -> None:
        """The bucket is deleted: its uploads go with it (as on S3), and so do the remembered
        answers of its completed ones, so that a bucket created again under the name has none."""
        for uid in [u for u, up in self.active.items() if up.bucket == bucket]:
            self.drop(uid, st)
        for uid in [u for u, done in self.completed.items() if done.bucket == bucket]:
            del self.completed[uid]

    def expire(self, st: GatewayState) -> None:
        now = time.monotonic()
        for uid in [u for u, up in self.active.items()
                    if not up.busy and now - up.last > UPLOAD_TTL]:
            self.drop(uid, st)

    def reclaim(self, st: GatewayState, need: int) -> int:
        """The memory budget is ``need`` bytes short: drop uploads idle for ``UPLOAD_GRACE``
        seconds or more, the longest idle first, until that much is free; the bytes freed."""
        now, freed = time.monotonic(), 0
        idle = sorted((up.last, uid) for uid, up in self.active.items()
                      if up.parts and not up.busy and now - up.last >= UPLOAD_GRACE)
        for _, uid in idle:
            if freed >= need:
                break
            up = self.active[uid]
            held = self.drop(uid, st)
            log.warning("multipart.idle_dropped", upload_id=uid, bucket=up.bucket,
                        idle_s=round(now - up.last, 1), bytes=held)
            freed += held
        return freed

    def remember(self, upload_id: str, done: Completed) -> None:
        self.completed[upload_id] = done
        while len(self.completed) > COMPLETED_MEMORY:
            self.completed.popitem(last=False)


UPLOADS: web.AppKey[Uploads] = web.AppKey("s3kv_uploads", Uploads)


def uploads_of(request: web.Request) -> Uploads:
    if UPLOADS not in request.app:
        raise RuntimeError("multipart uploads not configured")
    return request.app[UPLOADS]
