"""An open segment's upload to the backend, part by part as its parts fill (writer.py)."""

from __future__ import annotations

from s3kv.backends.base import Backend
from s3kv.retry import RetryPolicy
from s3kv.store.open_segment import OpenSegment
from s3kv.store.pacing import UploadSlots
from s3kv.store.segments import segment_key


async def upload_segment(seg: OpenSegment, backend: Backend, prefix: str, retry: RetryPolicy,
                         slots: UploadSlots) -> None:
    """Upload the segment's parts as they fill (``seg.queue``; None: its end). The multipart
    upload is created when a second part exists: a segment sealed within its first part (a
    short one, or any one when part_size == segment_size) goes as one PUT, which saves the
    Create and Complete round trips and, on servers whose Complete copies the parts, a second
    pass over the bytes. A segment a window was lent for is a multipart upload from the start
    (the window is onto that upload's bytes)."""
    first = await seg.queue.get()
    if first is None:
        return
    part = await seg.queue.get()
    if part is None and seg.upload.upload_id is None:  # no window lent: one PUT
        key = segment_key(prefix, seg.info.name)
        async with slots:
            await retry.run(lambda: backend.put_object(key, first))
        return
    await seg.upload.start()
    await seg.upload.add_part(first)
    while part is not None:
        await seg.upload.add_part(part)
        part = await seg.queue.get()
    await seg.upload.complete()
