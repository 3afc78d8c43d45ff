"""The object backend interface: a handful of async calls that every backend implements.

Backends know nothing of blocks or segments. Keys are backend object keys (already including
the store's prefix). Errors are s3kv.errors: ObjectMissing for an absent object, BackendUnavailable
for unreachable/timeouts/5xx, BackendError for everything else.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

from s3kv.wire.body import Buffer as Buffer
from s3kv.wire.body import Pieces as Pieces

#: takes a ranged read's bytes in order as they arrive; a view is valid only during the call
Sink = Callable[[memoryview], None]


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    last_modified: float  # unix seconds


@dataclass(frozen=True)
class UploadInfo:
    key: str
    upload_id: str
    initiated: float  # unix seconds


@runtime_checkable
class Backend(Protocol):
    """What the store needs from object storage."""

    #: a short human-readable description (``s3://bucket/prefix @ 2 endpoints``)
    description: str

    async def put_object(self, key: str, data: Pieces) -> None:
        """Write the object: one buffer, or pieces written back to back (never joined)."""
        ...

    async def get_range(self, key: str, start: int, length: int) -> bytes | bytearray:
        """Bytes [start, start+length) of the object; fewer only at the object's end."""
        ...

    async def get_object(self, key: str) -> bytes: ...

    async def head_object(self, key: str) -> int:
        """The object's size in bytes."""
        ...

    async def list_objects(self, prefix: str) -> list[ObjectInfo]: ...

    async def delete_objects(self, keys: Sequence[str]) -> None:
        """Delete keys; absent ones are not an error."""
        ...

    async def create_multipart(self, key: str, part_size: int) -> str:
        """Start a multipart upload. Every part but the last will be exactly ``part_size``."""
        ...

    async def upload_part(self, key: str, upload_id: str, part_number: int, data: Pieces) -> str:
        """Upload part ``part_number`` (1-based; one buffer or pieces); returns its ETag."""
        ...

    async def complete_multipart(self, key: str, upload_id: str,
                                 parts: Sequence[tuple[int, str]]) -> None: ...

    async def abort_multipart(self, key: str, upload_id: str) -> None: ...

    async def list_multipart_uploads(self, prefix: str) -> list[UploadInfo]: ...

    async def check(self) -> None:
        """Raise BackendUnavailable unless the backend answers and the bucket/dir exists."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class RangeStreamer(Protocol):
    """A backend that hands a ranged read's bytes over as they arrive (the S3 backend's fast
    path): a coalesced read of many blocks gives out each block as soon as it is complete."""

    async def stream_range(self, key: str, start: int, length: int, sink: Sink) -> int:
        """Feed bytes [start, start+length) of the object to ``sink``, in order; return how
        many were fed (fewer only at the object's end). A failed call may have fed some."""
        ...


@runtime_checkable
class RangeViewer(Protocol):
    """A backend that lends a range of an object as a read-only view of memory it maps (the
    file backend's mmap of the segment file): no copy, no buffer of the block's size. The view
    stays valid while it is referenced, even after the object is deleted."""

    async def view_range(self, key: str, start: int, length: int) -> memoryview:
        """Bytes [start, start+length) of the object (fewer only at its end), resident: the
        call has faulted them in off the event loop, so reading the view never waits on I/O."""
        ...


@runtime_checkable
class NowViewer(Protocol):
    """A backend that can lend a range at once, without blocking, when its bytes are in memory
    already (the file backend: a mapped segment whose pages are resident)."""

    def view_now(self, key: str, start: int, length: int) -> memoryview | None:
        """As ``RangeViewer.view_range``, on the event loop; None: not at hand, or too large
        to fault in on the loop (call that)."""
        ...


@runtime_checkable
class Presigner(Protocol):
    """A backend whose objects a client can read itself, by URLs the backend signs (the S3
    backend): the gateway's direct reads (``locate`` in the native API)."""

    async def presign_get(self, key: str, expires: int) -> str | None:
        """A URL for a GET of ``key``, a Range header allowed, valid ``expires`` seconds; None:
        none can be made (anonymous access)."""
        ...


@runtime_checkable
class UploadWindows(Protocol):
    """A backend that lends a writable window onto a multipart upload's own bytes (the file
    backend: a shared mapping of the upload's data file), so that a request body is received
    straight into the place it is stored (no second copy of it into the object). A part whose
    pieces include such a window, at the place it maps, does not write those bytes again."""

    async def upload_window(self, key: str, upload_id: str, offset: int,
                            length: int) -> memoryview | None:
        """Writable bytes [offset, offset+length) of the upload (the object's bytes there once
        it is complete), resident; None: none to lend (send those bytes in a part)."""
        ...

    def upload_window_now(self, key: str, upload_id: str, offset: int,
                          length: int) -> memoryview | None:
        """:meth:`upload_window`'s, if lending it needs no wait (for the event loop); None:
        ask that."""
        ...


@functools.cache
def lends_windows(cls: type) -> bool:
    """Whether a backend class is an UploadWindows (decided once per class)."""
    return issubclass(cls, UploadWindows)


async def feed_whole_range(backend: Backend, key: str, start: int, length: int,
                           sink: Sink) -> int:
    """``stream_range`` for a backend that reads a range whole: read it, then feed it."""
    data = await backend.get_range(key, start, length)
    sink(memoryview(data))
    return len(data)


@functools.cache
def _streams(cls: type) -> bool:
    """Whether a backend class is a RangeStreamer, decided once per class (``isinstance``
    against a runtime protocol walks its members on every call)."""
    return issubclass(cls, RangeStreamer)


async def stream_range(backend: Backend, key: str, start: int, length: int, sink: Sink) -> int:
    """Bytes [start, start+length) of the object to ``sink`` as they arrive where the backend
    can stream them (RangeStreamer), else all at once; returns how many were fed."""
    if _streams(type(backend)):
        return await cast(RangeStreamer, backend).stream_range(key, start, length, sink)
    return await feed_whole_range(backend, key, start, length, sink)
