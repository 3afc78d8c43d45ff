"""The file backend's multipart uploads (file.py): parts written straight into one data file.

Each upload is a directory under ``.uploads``: ``meta.json`` (the key, the part size, when it
began: what listings and the clean-up of orphans read) and ``data``, the file every part is
written into at its final offset ((n-1) * part_size), one part at a time (filelocks.py).
Completing truncates it to the parts' total, syncs it and hands it over to be renamed into
place.

What a part needs is kept in memory while the upload lives, in this process: its part size,
the data file open for writing, the sizes of the parts written. A part is one ``pwritev``;
before, every part also read ``meta.json``, opened the data file and created a small file
recording its size: metadata work (a journal write on XFS) per 16 MiB part for nothing a
live upload needs. On tmpfs the CPU it saves is within this machine's spread
(docs/performance-log.md, issue 17, session 27). An upload that this process did not begin (left
by one that stopped) is an orphan: it is listed, and aborted, never continued.

A range of the data file can also be lent as a writable window (:meth:`FileUploads.window`: a
slice of the file's one shared mapping, filewindows.py, its pages allocated up front; a
recycled file comes with its mapping), into which the gateway receives a request body
straight from the socket: one copy of those bytes (the kernel's) instead of two (the kernel's
into a buffer, then ``pwritev``'s into the file). A part whose pieces include the window, at
the place it maps, skips those bytes (they are there already); anything else is written.

Called from worker threads (the backend's ``_run``), but for two calls that need no wait, made
on the event loop: :meth:`FileUploads.window_now` (a window onto pages the file's mapping has
populated already, a recycled file's, while no part is being written; it spans the populated
pages after the range too, up to ``SPARE_WINDOW``, and the windows asked for next within it are
slices of it, lent with no lock, system call or new array, a part being written or not: the
file never shrinks while the upload lives, and each byte of the spare is written either
through the one slice lent for its block's room or by a part, never both. Small blocks
landing one after another, the plain lane's PUTs, each cost the loop ~15 us less that way)
and :meth:`FileUploads.part_in_place` (a part whose bytes are all in place: nothing to write). A
worker-thread hop costs more CPU than either (a native batch put: 8-14 % of the gateway's CPU
per block for the two, docs/performance-log.md, issue 17, session 35).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from s3kv.backends.base import Pieces, UploadInfo
from s3kv.backends.filelocks import FileLocks
from s3kv.backends.filewindows import MAP_MIN, FileMap
from s3kv.backends.pages import address_of
from s3kv.errors import InvalidInput, ObjectMissing
from s3kv.wire.body import Buffer, pieces_of, size_of

#: the directory of uploads in progress, under the backend's root
UPLOADS = ".uploads"
#: bytes past a window its lending populates too, so that small blocks received one after
#: another (the plain lane's, gateway/plainlane.py) mostly find their pages ready
POPULATE_AHEAD = 8 * 1024 * 1024
#: the most bytes one window lent at once spans (:meth:`FileUploads.window_now`): the next
#: windows within it are slices of it, lent with no lock, system call or new array
SPARE_WINDOW = 8 * 1024 * 1024
#: buffers per pwritev call (Linux's IOV_MAX is 1024)
_IOV_MAX = 1024


def write_at(fd: int, data: Pieces, offset: int) -> None:
    """Write ``data``'s pieces at ``offset`` with as few ``pwritev`` calls as they allow."""
    views = [memoryview(p) for p in pieces_of(data) if len(p)]
    i = 0
    while i < len(views):
        n = os.pwritev(fd, views[i:i + _IOV_MAX], offset)
        offset += n
        while n:  # step past what was written; a short write leaves the rest of a view
            if n >= len(views[i]):
                n -= len(views[i])
                i += 1
            else:
                views[i] = views[i][n:]
                n = 0


@dataclass
class _Upload:
    part_size: int
    fd: int  # the data file, open for reading and writing (windows map it)
    sizes: dict[int, int] = field(default_factory=dict)  # part number -> bytes written
    #: windows lent: id(array) -> (the array over the mapping, file offset it starts at, its
    #: address)
    windows: dict[int, tuple[npt.NDArray[np.uint8], int, int]] = field(default_factory=dict)
    #: the data file's mappings (the last one lends; an earlier, shorter one lives on with
    #: the windows it lent)
    maps: list[FileMap] = field(default_factory=list)
    #: the last window lent at once, as (its file offset, its end, its view): the windows
    #: asked for next, as small blocks land one after another, are slices of it
    spare: tuple[int, int, memoryview] | None = None

    def in_place(self, piece: Buffer, offset: int) -> bool:
        """Whether ``piece`` is part of a window of this file, at ``offset`` in it."""
        obj: object = piece.obj if isinstance(piece, memoryview) else None
        lent = self.windows.get(id(obj)) if obj is not None else None
        return lent is not None and lent[0] is obj \
            and lent[1] + address_of(piece) - lent[2] == offset

    def record(self, number: int, size: int) -> str:
        """Part ``number`` is written, ``size`` bytes: its ETag."""
        self.sizes[number] = size
        return f"{number}-{size}"

    def lend(self, fm: FileMap, arr: npt.NDArray[np.uint8], offset: int) -> memoryview:
        """``arr`` (a window of the data file's mapping ``fm`` at ``offset``) lent out, its
        bytes known to be in place from then on."""
        self.windows[id(arr)] = (arr, offset, fm.address + offset)
        return arr.data

    def write(self, data: Pieces, offset: int) -> None:
        """``data`` at ``offset``, but for the runs of it that are in place already."""
        if not self.windows:
            write_at(self.fd, data, offset)
            return
        run: list[Buffer] = []
        start = offset
        for piece in pieces_of(data):
            if self.in_place(piece, offset):
                if run:
                    write_at(self.fd, run, start)
                    run = []
                start = offset + len(piece)
            else:
                run.append(piece)
            offset += len(piece)
        if run:
            write_at(self.fd, run, start)


class FileUploads:
    def __init__(self, root: Path,
                 take_recycled: Callable[[Path], tuple[bool, FileMap | None]]) -> None:
        """``take_recycled(path)``: put a recycled file at ``path`` and say so, with the
        mapping kept with it, if any ((False, None): none to take)."""
        self.directory = root / UPLOADS
        self._take_recycled = take_recycled
        self._live: dict[str, _Upload] = {}
        self._writing = FileLocks()  # parts of one upload are written one at a time

    def _dir(self, upload_id: str) -> Path:
        if not upload_id.isalnum():
            raise InvalidInput(f"invalid upload id {upload_id!r}")
        return self.directory / upload_id

    def _live_upload(self, upload_id: str) -> _Upload:
        up = self._live.get(upload_id)
        if up is None:
            self._dir(upload_id)  # an invalid id is InvalidInput, not a missing upload
            raise ObjectMissing(f"no such upload {upload_id} in progress here")
        return up

    def create(self, key: str, part_size: int) -> str:
        upload_id = uuid.uuid4().hex
        d = self._dir(upload_id)
        d.mkdir(parents=True)
        kept: FileMap | None = None
        try:
            (d / "meta.json").write_text(json.dumps(
                {"key": key, "part_size": part_size, "initiated": time.time()}))
            data = d / "data"
            recycled, kept = self._take_recycled(data)
            fd = os.open(data, os.O_RDWR | (0 if recycled else os.O_CREAT), 0o644)
        except OSError:
            # disk full, I/O error: no caller will ever know this upload id, and an empty
            # meta.json is skipped by listings, so nothing would ever remove it
            if kept is not None:
                kept.close()
            self.remove(upload_id)
            raise
        self._live[upload_id] = _Upload(part_size, fd, maps=[kept] if kept is not None else [])
        return upload_id

    def write_part(self, upload_id: str, number: int, data: Pieces) -> str:
        up = self._live_upload(upload_id)
        size = size_of(data)
        if size > up.part_size:
            raise InvalidInput(f"part {number} is {size} bytes, over part_size {up.part_size}")
        with self._writing.held(upload_id):
            self._live_upload(upload_id)  # not aborted while this waited
            up.write(data, (number - 1) * up.part_size)
        return up.record(number, size)

    def part_in_place(self, upload_id: str, number: int, data: Pieces) -> str | None:
        """:meth:`write_part` for a part whose every byte is in a window at its place already
        (received there: nothing to write, no thread needed); None: not so, write it."""
        up = self._live_upload(upload_id)
        size = size_of(data)
        offset = (number - 1) * up.part_size
        if size > up.part_size or not up.windows:
            return None
        for piece in pieces_of(data):
            if not up.in_place(piece, offset):
                return None
            offset += len(piece)
        return up.record(number, size)

    def window_now(self, upload_id: str, offset: int, length: int) -> memoryview | None:
        """:meth:`window`, when it needs no wait and no page-table work (the file's mapping
        covers the range, its pages populated, the file long enough, no part being written):
        for the event loop. A window lent here spans the populated pages after the range too
        (``SPARE_WINDOW`` at most): a range within that spare is lent as a slice of it, with
        no check but the range's. None: not so, ask :meth:`window` (in a worker thread)."""
        up = self._live_upload(upload_id)
        end = offset + length
        if up.spare is not None and up.spare[0] <= offset and end <= up.spare[1]:
            return up.spare[2][offset - up.spare[0]:end - up.spare[0]]
        fm = up.maps[-1] if up.maps else None
        if fm is None or not fm.ready(offset, length):
            return None
        with self._writing.held_if_free(upload_id) as held:
            size = os.fstat(up.fd).st_size if held else 0
            if size < end:
                return None
            # as far as the pages are populated and the file is long: what comes next is
            # lent from it (the file never shrinks while the upload lives)
            spare = fm.ready_until(end, min(size, offset + max(length, SPARE_WINDOW)))
            view = up.lend(fm, fm.window(offset, spare - offset), offset)
            up.spare = (offset, spare, view)
            return view[:length]

    def window(self, upload_id: str, offset: int, length: int) -> memoryview | None:
        """A writable view of the data file's bytes [offset, offset+length), its pages
        allocated (so writing it never faults for want of space), and those of the next
        ``POPULATE_AHEAD`` bytes the file has (so the windows after it are lent at once, by
        :meth:`window_now`); None where the kernel cannot allocate them up front (before
        Linux 5.14) or the filesystem is full."""
        up = self._live_upload(upload_id)
        end = offset + length
        with self._writing.held(upload_id):
            self._live_upload(upload_id)  # not aborted while this waited
            size = os.fstat(up.fd).st_size
            fm = up.maps[-1] if up.maps and len(up.maps[-1]) >= end else None
            if fm is None:  # mapped afresh, the file grown to it (sparse) first
                size = max(end, size, MAP_MIN, 2 * len(up.maps[-1]) if up.maps else 0)
                os.ftruncate(up.fd, size)
                fm = FileMap(up.fd, size)
                up.maps.append(fm)
            elif size < end:  # a recycled file shorter than its mapping
                size = end
                os.ftruncate(up.fd, end)
        arr = None
        for ahead in (min(POPULATE_AHEAD, size - end), 0):  # without: a nearly full disk
            try:  # populated outside the upload's lock, as parts may be written meanwhile
                arr = fm.window(offset, length, ahead)
                break
            except OSError:
                continue
        return None if arr is None else up.lend(fm, arr, offset)

    def complete(self, upload_id: str, parts: Sequence[tuple[int, str]],
                 publish: Callable[[int, int, Path, list[FileMap]], None]) -> None:
        """Check the parts, then ``publish(fd, total, data_path, maps)`` (truncate, sync,
        rename into place; ``maps``: the data file's mappings, whose windows may still be
        alive and must not see another object's bytes: filemaps.py's ``adopt``); the upload
        is gone afterwards."""
        up = self._live_upload(upload_id)
        numbers = [n for n, _ in parts]
        if numbers != list(range(1, len(parts) + 1)):
            raise InvalidInput(f"parts must be 1..N in order, got {numbers}")
        total = 0
        for i, n in enumerate(numbers):
            size = up.sizes.get(n)
            if size is None:
                raise InvalidInput(f"part {n} of upload {upload_id} was not written")
            if i < len(parts) - 1 and size != up.part_size:
                raise InvalidInput(f"part {n} is {size} bytes; all but the last must be "
                                   f"{up.part_size}")
            total += size
        with self._writing.held(upload_id):
            publish(up.fd, total, self._dir(upload_id) / "data", up.maps)
            up.maps = []  # the published file's now
        self.remove(upload_id)

    def remove(self, upload_id: str) -> None:
        """Forget the upload and delete its directory (after a part being written, if any)."""
        d = self._dir(upload_id)
        up = self._live.get(upload_id)
        if up is not None:
            with self._writing.held(upload_id):  # no write is using the descriptor
                if self._live.pop(upload_id, None) is not None:
                    os.close(up.fd)
                    for fm in up.maps:  # aborted: its file is deleted
                        fm.close()
        if not d.exists():
            return
        for f in list(d.iterdir()):
            f.unlink(missing_ok=True)
        d.rmdir()

    def list(self, prefix: str) -> list[UploadInfo]:
        out: list[UploadInfo] = []
        for d in self.directory.iterdir():
            try:
                meta = json.loads((d / "meta.json").read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                continue
            if str(meta["key"]).startswith(prefix):
                out.append(UploadInfo(str(meta["key"]), d.name, float(meta["initiated"])))
        return out
