"""One multipart upload, driven part by part, aborted on any failure.

The only multipart loop in s3kv: the segment writer feeds it parts as they fill; it keeps at
most the caller's semaphore's worth of parts in flight, collects ETags in order, and completes,
or aborts the upload if anything failed (so no orphan upload is left behind on purpose).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol, cast

from s3kv.backends.base import Backend, UploadWindows, lends_windows
from s3kv.errors import BackendError
from s3kv.log import get_logger
from s3kv.retry import RetryPolicy
from s3kv.wire.body import Pieces, size_of

log = get_logger(__name__)


class Slots(Protocol):
    """What bounds part uploads in flight: an ``asyncio.Semaphore``, or the store's pacing."""

    async def acquire(self) -> bool: ...

    def release(self) -> None: ...


class MultipartUpload:
    def __init__(self, backend: Backend, key: str, part_size: int, retry: RetryPolicy,
                 slots: Slots) -> None:
        self.backend = backend
        self.key = key
        self.part_size = part_size
        self.retry = retry
        self.slots = slots
        self.upload_id: str | None = None
        self._etags: dict[int, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._next_part = 1
        self.bytes_sent = 0
        self.failed: BaseException | None = None
        self._starting = asyncio.Lock()
        self._aborted = False

    async def start(self) -> None:
        """Create the upload (once: a call while another creates it waits for that one)."""
        async with self._starting:
            if self.upload_id is None:
                self.upload_id = await self.retry.run(
                    lambda: self.backend.create_multipart(self.key, self.part_size))

    async def window(self, offset: int, length: int) -> memoryview | None:
        """A writable window onto the upload's bytes [offset, offset+length) where the backend
        lends one (UploadWindows; the upload is created first); None: send them in a part."""
        if not lends_windows(type(self.backend)):
            return None
        await self.start()
        upload_id, lender = self.upload_id, cast(UploadWindows, self.backend)
        assert upload_id is not None
        return await lender.upload_window(self.key, upload_id, offset, length)

    def window_now(self, offset: int, length: int) -> memoryview | None:
        """:meth:`window`, when the upload exists and the backend lends the window without a
        wait; None: ask that."""
        if self.upload_id is None or not lends_windows(type(self.backend)):
            return None
        lender = cast(UploadWindows, self.backend)
        return lender.upload_window_now(self.key, self.upload_id, offset, length)

    async def add_part(self, data: Pieces) -> None:
        """Queue the next part. Waits for an in-flight slot (this is the backpressure point)."""
        if self.failed is not None:
            raise BackendError(f"upload of {self.key} already failed: {self.failed}") \
                from self.failed
        number = self._next_part
        self._next_part += 1
        await self.slots.acquire()
        task = asyncio.create_task(self._send(number, data))
        # released by a done-callback, which runs even for a task cancelled before it started
        task.add_done_callback(lambda _t: self.slots.release())
        self._tasks.append(task)

    async def _send(self, number: int, data: Pieces) -> None:
        assert self.upload_id is not None
        upload_id = self.upload_id
        try:
            etag = await self.retry.run(
                lambda: self.backend.upload_part(self.key, upload_id, number, data))
            self._etags[number] = etag
            self.bytes_sent += size_of(data)
        except BaseException as exc:
            if self.failed is None:
                self.failed = exc
            raise

    async def complete(self) -> None:
        """Wait for every part, then complete; abort and re-raise on any failure."""
        try:
            if self.upload_id is None:
                await self.start()
            results = await asyncio.gather(*self._tasks, return_exceptions=True)
            for res in results:
                if isinstance(res, BaseException):
                    raise res
            assert self.upload_id is not None
            upload_id = self.upload_id
            parts = sorted(self._etags.items())
            await self.retry.run(
                lambda: self.backend.complete_multipart(self.key, upload_id, parts))
        except BaseException:
            await self.abort()
            raise

    async def abort(self) -> None:
        """Cancel parts in flight and abort the upload (best effort; logged if it fails). Once:
        a later call (the writer's, after a failed complete aborted) does nothing."""
        if self._aborted:
            return
        self._aborted = True
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.upload_id is None:
            return
        try:
            await self.backend.abort_multipart(self.key, self.upload_id)
            log.info("multipart.aborted", key=self.key, upload_id=self.upload_id)
        except BackendError as exc:
            # The orphan is cleaned up at the next start (own node id) or by age.
            log.warning("multipart.abort_failed", key=self.key, upload_id=self.upload_id,
                        error=str(exc))
