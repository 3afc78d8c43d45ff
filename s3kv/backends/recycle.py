"""Files of deleted objects, kept to be written over by the next large object (file backend).

A cache tier at its capacity deletes a whole segment file for every one it writes. Writing a
new file makes the filesystem allocate every block (tmpfs: allocate, zero and charge every
page; XFS: allocate extents and convert them on the first write); writing over a file that
already has its blocks skips all of that. Measured on a 2-core KVM machine here: a ``pwrite``
into fresh tmpfs pages 0.5-1.3 GiB/s, over an existing file's pages 3.2-3.6 GiB/s; in the
gateway it was the largest single cost of a 32 MiB PUT (39% of its CPU under ``perf``). Log
writers reuse their files for the same reason (RocksDB's ``recycle_log_file_num``).

A deleted object's file of at least ``min_bytes`` is moved here (a rename) instead of being
unlinked, while the pool holds at most ``limit_bytes``; a new large object (a multipart
upload's data file, a large PUT) takes one and is written over it, then truncated to its own
length. A file is only taken while no memory map of it is in use (``MappedFiles.move_if_unmapped``):
a reader's view of a deleted segment keeps the old bytes, never the next object's. A file
comes with its writable mapping when one was kept (filewindows.py), for the next upload to
lend windows from: ``take`` hands both over. Files left here by an earlier process are reused.
Thread-safe: the backend calls it from worker threads.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

from s3kv.backends.filemaps import MappedFiles
from s3kv.backends.filewindows import FileMap
from s3kv.sizes import GiB, MiB

#: bytes of deleted files kept for reuse (four 256 MiB segments)
RECYCLE_BYTES = 1 * GiB
#: smaller files are simply deleted (manifests, namespace records, short segments)
RECYCLE_MIN = 8 * MiB


class RecycledFiles:
    def __init__(self, directory: Path, maps: MappedFiles, *, limit_bytes: int = RECYCLE_BYTES,
                 min_bytes: int = RECYCLE_MIN) -> None:
        self.directory = directory
        self.limit_bytes = limit_bytes
        self.min_bytes = min_bytes
        self._maps = maps
        self._files: dict[Path, int] = {}  # pooled file -> its size
        self._mapped: dict[Path, FileMap] = {}  # pooled file -> its kept mapping
        self._bytes = 0
        self._lock = threading.Lock()
        self._names = itertools.count()
        self.reused = 0  # files taken for a new object since start
        self.maps_reused = 0  # of them, taken with their writable mapping

    @property
    def bytes(self) -> int:
        """Bytes the pool holds (space that is free for new objects, as far as the store is
        concerned)."""
        return self._bytes

    def load(self) -> None:
        """Take over the files an earlier process left (over the limit: deleted). Blocking."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._lock:
            for entry in sorted(self.directory.iterdir()):
                size = entry.stat().st_size
                if self._bytes + size <= self.limit_bytes:
                    self._files[entry] = size
                    self._bytes += size
                else:
                    entry.unlink(missing_ok=True)

    def offer(self, path: Path) -> bool:
        """Keep ``path`` (an object being deleted) for reuse, if it is large, fits in the pool
        and nobody reads it through a memory map. False: the caller deletes it. Blocking."""
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return False
        if size < self.min_bytes:
            return False
        with self._lock:
            if self._bytes + size > self.limit_bytes:
                return False
            dest = self.directory / f"{os.getpid()}-{next(self._names)}"
            maps = self._maps.move_if_unmapped(path, dest)
            if maps is None:
                return False
            if maps:  # the longest one lends
                maps.sort(key=len)
                lender = maps.pop()
                self._mapped[dest] = lender
                for fm in maps:
                    fm.close()
            self._files[dest] = size
            self._bytes += size
        return True

    def take(self, dest: Path) -> tuple[bool, FileMap | None]:
        """Move the largest pooled file to ``dest`` to be written over (the writer truncates
        it to its own length), with the writable mapping kept with it, if any: the caller's
        to lend windows from, or to close (also when it cannot use the file after all).
        (False, None): none pooled; create a new file. Blocking."""
        with self._lock:
            if not self._files:
                return False, None
            path = max(self._files, key=self._files.__getitem__)
            size = self._files.pop(path)
            self._bytes -= size
            kept = self._mapped.pop(path, None)
            try:
                os.replace(path, dest)
            except FileNotFoundError:  # removed behind our back: nothing to reuse
                if kept is not None:
                    kept.close()
                return False, None
            self.reused += 1
            self.maps_reused += kept is not None
        return True, kept

    def drop_maps(self) -> None:
        """Let go of the mappings kept with pooled files (the backend closes)."""
        with self._lock:
            maps, self._mapped = list(self._mapped.values()), {}
        for fm in maps:
            fm.close()
