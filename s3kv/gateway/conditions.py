"""Conditional requests as S3 defines them, and the per-key locks that make writes atomic.

Reads (GET, HEAD): If-Match, If-Unmodified-Since (412 PreconditionFailed), If-None-Match and
If-Modified-Since (304 Not Modified), evaluated in RFC 9110 section 13.2.2's order: If-Match,
else If-Unmodified-Since; then If-None-Match, else If-Modified-Since.

Writes (PUT, CompleteMultipartUpload, DELETE): ``If-None-Match: *`` succeeds only if the key
is absent (put-if-absent), ``If-Match: <etag>`` only if the key exists with that ETag; both
answer 412 PreconditionFailed otherwise (a missing key included). Deletes also take S3's
conditional-delete demands (:class:`Demands`: DeleteObject's ``x-amz-if-match-last-modified-time``
and ``x-amz-if-match-size``, a DeleteObjects entry's ``ETag``, ``LastModifiedTime`` and ``Size``),
and AbortMultipartUpload its ``x-amz-if-match-initiated-time``. A conditional write checks and
writes under the key's lock (:class:`KeyLocks`), so two conditional writes of one key in one
gateway never both pass: of many concurrent put-if-absent PUTs of a key exactly one succeeds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from s3kv.errors import RequestError
from s3kv.wire.headers import is_decimal

NOT_MODIFIED = 304


def _etags(value: str) -> list[str]:
    out = []
    for item in value.split(","):
        item = item.strip()
        if item.startswith("W/"):
            item = item[2:]
        if item:
            out.append(item.strip('"'))
    return out


def _matches(value: str, etag: str | None) -> bool:
    """Whether an If-Match / If-None-Match list matches ``etag`` (None: no current object)."""
    if etag is None:
        return False
    tags = _etags(value)
    return "*" in tags or etag.strip('"') in tags


def _date(headers: Mapping[str, str], name: str) -> float | None:
    """A date header as Unix seconds; None if absent or unparseable (then it is ignored, as
    RFC 9110 says)."""
    value = headers.get(name)
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def precondition_failed(condition: str) -> RequestError:
    return RequestError("PreconditionFailed", "At least one of the pre-conditions you specified "
                        f"did not hold ({condition}).", 412)


def check_read(headers: Mapping[str, str], etag: str, last_modified: float) -> int | None:
    """Evaluate GET/HEAD preconditions: None to answer normally, NOT_MODIFIED for a 304;
    raises PreconditionFailed (412)."""
    modified = float(int(last_modified))  # Last-Modified has whole seconds
    if_match = headers.get("If-Match")
    if if_match is not None:
        if not _matches(if_match, etag):
            raise precondition_failed("If-Match")
    else:
        since = _date(headers, "If-Unmodified-Since")
        if since is not None and modified > since:
            raise precondition_failed("If-Unmodified-Since")
    if_none = headers.get("If-None-Match")
    if if_none is not None:
        if _matches(if_none, etag):
            return NOT_MODIFIED
    else:
        since = _date(headers, "If-Modified-Since")
        if since is not None and modified <= since:
            return NOT_MODIFIED
    return None


def is_conditional_write(headers: Mapping[str, str]) -> bool:
    return "If-Match" in headers or "If-None-Match" in headers


def check_write(headers: Mapping[str, str], etag: str | None) -> None:
    """Evaluate PUT/Complete/DELETE preconditions against the current ETag (None: the key is
    absent). Raises PreconditionFailed (412), or NotImplemented for an If-None-Match other
    than ``*``."""
    if_none = headers.get("If-None-Match")
    if if_none is not None:
        if if_none.strip() != "*":
            raise RequestError("NotImplemented", "A header you provided implies functionality "
                               "that is not implemented: If-None-Match on a write takes only "
                               "'*'.", 501)
        if etag is not None:
            raise precondition_failed("If-None-Match")
    if_match = headers.get("If-Match")
    if if_match is not None and not _matches(if_match, etag):
        raise precondition_failed("If-Match")


@dataclass(frozen=True)
class Demands:
    """What a conditional delete or abort demands of the object (upload) there now, each None
    when not asked: its ETag (a DeleteObjects entry's ``ETag``; DeleteObject's If-Match goes
    through :func:`check_write`), its time (last modified, or initiated) in whole seconds, its
    size. Nothing there fails an ETag and passes the others, as S3 answers."""

    etag: str | None = None
    time: int | None = None
    size: int | None = None

    def asked(self) -> bool:
        return self != _NOTHING

    def check(self, there: bool, etag: str = "", time: float = 0.0, size: int = 0) -> None:
        """PreconditionFailed (412) unless what is ``there`` (if anything) is as demanded."""
        if self.etag is not None and not (there and _matches(self.etag, etag)):
            raise precondition_failed("the ETag")
        if not there:
            return
        if self.time is not None and self.time != int(time):
            raise precondition_failed("the last-modified or initiated time")
        if self.size is not None and self.size != size:
            raise precondition_failed("the size")


    @classmethod
    def read(cls, etag: str | None, time: str | None, size: str | None, *,
             iso: bool = False) -> Demands:
        """The demands as a request writes them (None: not asked): the time an HTTP date (as
        the SDKs send it; ``iso``: or ISO 8601, as an XML entry may), the size a non-negative
        integer; ValueError naming the one that cannot be read (a condition is never
        dropped)."""
        seconds = None
        if time is not None:
            try:
                seconds = int(parsedate_to_datetime(time.strip()).timestamp())
            except (TypeError, ValueError, IndexError, OverflowError):
                if not iso:
                    raise ValueError("time") from None
                try:
                    when = datetime.fromisoformat(time.strip())
                except ValueError:
                    raise ValueError("time") from None
                seconds = int(when.replace(tzinfo=when.tzinfo or UTC).timestamp())
        if size is not None and not is_decimal(size.strip()):
            raise ValueError("size")
        return cls(etag.strip() if etag and etag.strip() else None, seconds,
                   None if size is None else int(size))


_NOTHING = Demands()


def header_demands(headers: Mapping[str, str], time_header: str, *,
                   sized: bool = True) -> Demands:
    """A DeleteObject's ``x-amz-if-match-last-modified-time`` and ``x-amz-if-match-size``, or
    an AbortMultipartUpload's ``x-amz-if-match-initiated-time`` (``time_header``; ``sized``
    False: no size); 400 InvalidArgument for one that cannot be read."""
    size_header = "x-amz-if-match-size"
    try:
        return Demands.read(None, headers.get(time_header),
                            headers.get(size_header) if sized else None)
    except ValueError as exc:
        raise RequestError("InvalidArgument", f"{time_header} must be an HTTP date."
                           if str(exc) == "time" else f"{size_header} must be a non-negative "
                           "integer.") from None


class KeyLocks:
    """One asyncio lock per (bucket, key) with a conditional write in progress; a lock lives only
    while someone holds or waits for it, so memory is bounded by the requests in flight."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, bytes], tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    def hold(self, bucket: str, key: bytes) -> KeyHold:
        """``async with locks.hold(bucket, key):`` the key's lock is held inside."""
        return KeyHold(self, (bucket, key))

    def free(self, bucket: str, key: bytes) -> bool:
        """Whether no one holds or waits for the key's lock (a write done without a wait is
        then as good as one done holding it)."""
        return (bucket, key) not in self._locks

    def acquire_for(self, k: tuple[str, bytes]) -> asyncio.Lock:
        """Count one more user of ``k``'s lock (made if none) and return it."""
        lock, users = self._locks.get(k, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[k] = (lock, users + 1)
        return lock

    def release_for(self, k: tuple[str, bytes]) -> None:
        """One user of ``k``'s lock fewer; the last one forgets the lock."""
        lock, users = self._locks[k]
        if users <= 1:
            del self._locks[k]
        else:
            self._locks[k] = (lock, users - 1)


class KeyHold:
    """The async context manager of :meth:`KeyLocks.hold` (a class, not a generator-based
    contextmanager: it is entered on every PUT)."""

    __slots__ = ("_key", "_lock", "_locks")

    def __init__(self, locks: KeyLocks, key: tuple[str, bytes]) -> None:
        self._locks = locks
        self._key = key
        self._lock: asyncio.Lock | None = None

    async def __aenter__(self) -> None:
        lock = self._locks.acquire_for(self._key)
        try:
            await lock.acquire()
        except BaseException:
            self._locks.release_for(self._key)
            raise
        self._lock = lock

    async def __aexit__(self, *exc: object) -> None:
        assert self._lock is not None
        self._lock.release()
        self._locks.release_for(self._key)
