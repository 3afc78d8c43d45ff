"""Room in the open segment for blocks received straight into their place (landing.py): taken
at aligned offsets with a window the backend lends onto them (the file backend: the segment's
file), then committed (their manifest entries) or given up (dead bytes no entry points to).

Taking room holds the writer's lock, as an append does, so that a batch's blocks are one run
of bytes with no other request's block between them; :func:`take_now` takes it from the event
loop's callback when nothing needs a wait (a plain PUT in gateway/plainlane.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from s3kv.errors import BackendError, BackendUnavailable
from s3kv.log import get_logger
from s3kv.store import layout
from s3kv.store.open_segment import OpenSegment, Room
from s3kv.store.writer import SegmentWriter

log = get_logger(__name__)

Blocks = Sequence[tuple[bytes, int]]  # (key, length)


async def take(writer: SegmentWriter, namespace: str, blocks: Blocks, attrs: int
               ) -> list[Room] | None:
    """Room for ``blocks`` to be received straight into the open segment, one after another
    at aligned offsets (one window per segment they span, its gaps zeroed). None if the
    backend lends no window (append them instead). Each manifest entry's room (``attrs``
    bytes of attributes) is held until :func:`commit` or :func:`give_up`."""
    writer.health.check()
    rooms: list[Room] = []
    async with writer.lock:
        try:
            while len(rooms) < len(blocks):
                writer.health.check()
                run = await _take_run(writer, namespace, blocks[len(rooms):], attrs)
                if run is None:
                    break
                rooms += run
        finally:
            if len(rooms) < len(blocks):  # failed, or no window: what was taken is given up
                for room in rooms:
                    give_up(room.segment, namespace, room.key, attrs)
    return rooms if len(rooms) == len(blocks) else None


async def _take_run(writer: SegmentWriter, namespace: str, blocks: Blocks,
                    attrs: int) -> list[Room] | None:
    """The leading ``blocks`` that fit one segment, in one window; the caller holds the
    lock."""
    seg = await writer.segment_for(namespace, blocks[0][0], blocks[0][1], attrs)
    offsets = seg.plan_run(namespace, blocks, writer.s.block_align, writer.s.segment_size, attrs)
    if not offsets:
        return None
    run = _hold(seg, namespace, blocks, offsets, attrs)
    window = None
    try:
        window = await seg.upload.window(offsets[0], _extent(blocks, offsets))
    except BackendError as exc:
        log.warning("writer.window_failed", segment=seg.info.name, error=str(exc))
    finally:
        if window is None:
            for key, _, _ in run:
                seg.landed(namespace, key, attrs)
    if window is None:
        return None
    rooms = seg.land(window, run)
    writer.started(seg)
    return rooms


def take_now(writer: SegmentWriter, namespace: str, blocks: Blocks, attrs: int
             ) -> list[Room] | None:
    """:func:`take`'s rooms when nothing needs a wait: the lock free, the blocks fit the open
    segment, whose upload lends their window at once; None: ask it (nothing is held)."""
    seg = writer.current
    if seg is None or writer.lock.locked() or not writer.health.healthy:
        return None
    offsets = seg.plan_run(namespace, blocks, writer.s.block_align, writer.s.segment_size, attrs)
    window = seg.upload.window_now(offsets[0], _extent(blocks, offsets)) \
        if len(offsets) == len(blocks) else None
    if window is None:
        return None
    rooms = seg.land(window, _hold(seg, namespace, blocks, offsets, attrs))
    writer.started(seg)
    return rooms


def _extent(blocks: Blocks, offsets: list[int]) -> int:
    """Bytes from the first planned block's offset to the end of the last one (the blocks
    planned at ``offsets``: the leading ones)."""
    return offsets[-1] + blocks[len(offsets) - 1][1] - offsets[0]


def _hold(seg: OpenSegment, namespace: str, blocks: Blocks, offsets: list[int],
          attrs: int) -> list[tuple[bytes, int, int]]:
    """The blocks planned at ``offsets`` in ``seg`` (key, offset, length), their room held
    (the segment seals only once they are in or given up)."""
    run = [(key, offset, n) for (key, n), offset in zip(blocks, offsets, strict=False)]
    seg.pad(offsets[0] - seg.size)
    for key, _, _ in run:
        seg.expect_landing(namespace, key, attrs)
    return run


def commit(writer: SegmentWriter, seg: OpenSegment, entry: layout.Entry,
           attrs: int) -> layout.Entry:
    """The block received into ``seg`` at ``entry.offset`` (taken with ``attrs``) is in and
    verified: its entry (no stamp yet) joins the segment's manifest, stamped now. Raises
    BackendUnavailable if the segment failed meanwhile (the block is lost)."""
    try:
        if seg.done.done() or not writer.holds(seg.info.seg_id):
            raise BackendUnavailable(f"segment {seg.info.name} failed while a block was "
                                     "received into it; retry the write")
        return writer.enter(seg, entry, entry.offset, entry.length)
    finally:
        seg.landed(entry.namespace, entry.key, attrs)


def give_up(seg: OpenSegment, namespace: str, key: bytes, attrs: int) -> None:
    """The block whose room was taken in ``seg`` (with ``attrs``) will not come (its bytes
    there are dead space)."""
    seg.landed(namespace, key, attrs)
