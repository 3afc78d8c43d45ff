"""Local-directory backend: the embedded default, and the md RAID-0 + XFS node design.

Objects are files under the root. A multipart upload writes each part straight into a hidden
temporary file at its final offset ((n-1) * part_size), so a segment is written once, in large
aligned writes (one part at a time per file: filelocks.py), and published by an atomic rename
on completion (fileuploads.py). All file I/O runs in threads.
Ranged reads can also be lent as views of a memory map of the file (``view_range``, filemaps.py).
Large deleted files are kept (up to ``recycle_bytes``) and written over by the next large
objects instead of new files being allocated (recycle.py).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

from s3kv.backends.base import ObjectInfo, Pieces, UploadInfo
from s3kv.backends.filemaps import MappedFiles
from s3kv.backends.fileuploads import UPLOADS, FileUploads, write_at
from s3kv.backends.filewindows import FileMap
from s3kv.backends.recycle import RECYCLE_BYTES, RecycledFiles
from s3kv.errors import (
    BackendError,
    BackendUnavailable,
    ConfigError,
    InvalidInput,
    ObjectMissing,
)
from s3kv.wire.body import size_of

#: where deleted files wait to be written over (recycle.py); not an object, never listed
_RECYCLED = ".recycled"
#: a filesystem with less than this available is full: the backend reports itself unavailable
#: (so the writer refuses writes with 503 SlowDown until space returns, instead of accepting
#: write-back blocks into segments that cannot be written)
MIN_FREE = 8 * 1024 * 1024
#: ranges up to this size are viewed on the event loop when in memory (``view_now``); larger
#: ones are faulted in by a worker thread, which also spares the loop their page-table work
NOW_MAX = 1024 * 1024


#: object keys whose paths are remembered (segments and manifests: a few per GiB stored)
_PATHS_KEPT = 4096
#: what a store directory holds (docs/format.md) besides ``lost+found`` (a fresh ext4 mount)
_OWN_ENTRIES = frozenset({"segments", "manifests", "namespaces", "deleted-namespaces", UPLOADS,
                          _RECYCLED})


def _foreign_entries(root: Path) -> list[str]:
    """The entries of an existing directory that is not a store (none of a store's own, some
    others): a mistyped --store must not fill someone's directory with segments."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []  # missing (created by _mkdirs), or unusable (which _mkdirs reports)
    if _OWN_ENTRIES.intersection(names):
        return []
    return [n for n in names if n != "lost+found"]


class FileBackend:
    def __init__(self, root: str | Path, *, fsync: bool = True,
                 recycle_bytes: int = RECYCLE_BYTES) -> None:
        """``recycle_bytes``: deleted large files kept to be written over (0: none)."""
        self.root = Path(root).resolve()
        self.fsync = fsync
        self.description = f"file://{self.root}"
        self._maps = MappedFiles()
        self._paths: dict[str, Path] = {}
        self.recycled = RecycledFiles(self.root / _RECYCLED, self._maps,
                                      limit_bytes=recycle_bytes)
        self._uploads = FileUploads(self.root, self.recycled.take)

    async def open(self) -> FileBackend:
        await asyncio.to_thread(self._mkdirs)
        return self

    def _mkdirs(self) -> None:
        foreign = _foreign_entries(self.root)
        if foreign:
            raise ConfigError(
                f"store directory {self.root} is not empty and is not an s3kv store (it holds "
                f"{', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}): give a new "
                "or empty directory, or the directory of an existing s3kv store")
        try:
            self._uploads.directory.mkdir(parents=True, exist_ok=True)
            self.recycled.load()
        except OSError as exc:
            raise BackendError(f"cannot create store directory {self.root}: {exc}") from exc

    def _path(self, key: str) -> Path:
        """The file of ``key`` (checked; remembered, since every GET asks: building and hashing
        a new Path cost more than the rest of a small GET's view of its segment)."""
        path = self._paths.get(key)
        if path is not None:
            return path
        parts = key.split("/")
        if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts) \
                or parts[0] in (UPLOADS, _RECYCLED):
            raise InvalidInput(f"invalid object key for the file backend: {key!r}")
        if len(self._paths) >= _PATHS_KEPT:
            self._paths.clear()
        path = self._paths[key] = self.root.joinpath(*parts)
        return path

    @staticmethod
    def _io_error(exc: OSError, what: str) -> BackendError:
        if isinstance(exc, FileNotFoundError):
            return ObjectMissing(f"{what}: not found")
        # disk full, permission denied, I/O errors: not retried, reported as they are
        return BackendError(f"{what}: {exc.strerror or exc}", transient=False)

    async def _run(self, what: str, fn: object, *args: object) -> object:
        try:
            return await asyncio.to_thread(fn, *args)  # type: ignore[arg-type]
        except OSError as exc:
            raise self._io_error(exc, what) from exc

    # ---- objects ------------------------------------------------------------------------
    def _write_atomic(self, path: Path, data: Pieces) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        size = size_of(data)
        try:
            reused, kept = (self.recycled.take(tmp) if size >= self.recycled.min_bytes
                            else (False, None))
            if kept is not None:  # written here, not through it
                kept.close()
            fd = os.open(tmp, os.O_WRONLY | (0 if reused else os.O_CREAT | os.O_TRUNC), 0o644)
            try:
                write_at(fd, data, 0)
                if reused:
                    os.ftruncate(fd, size)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    async def put_object(self, key: str, data: Pieces) -> None:
        path = self._path(key)
        self._maps.forget(path)
        await self._run(f"PUT {key}", self._write_atomic, path, data)

    @staticmethod
    def _pread(path: Path, start: int, length: int) -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.pread(fd, length, start)
        finally:
            os.close(fd)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        data = await self._run(f"GET {key}", self._pread, self._path(key), start, length)
        assert isinstance(data, bytes)
        return data

    async def view_range(self, key: str, start: int, length: int) -> memoryview:
        if length <= 0:
            return memoryview(b"")
        now = self.view_now(key, start, length)  # small and in memory already: no thread hop
        if now is not None:
            return now
        view = await self._run(f"GET {key}", self._maps.view, self._path(key), start, length)
        assert isinstance(view, memoryview)
        return view

    def view_now(self, key: str, start: int, length: int) -> memoryview | None:
        """The range as a view, at once, if it is at most ``NOW_MAX`` bytes, its file is
        mapped and its pages are in memory; None otherwise (``view_range`` maps and faults it
        in a worker thread)."""
        if length > NOW_MAX:
            return None
        return self._maps.view_now(self._path(key), start, length)

    async def get_object(self, key: str) -> bytes:
        data = await self._run(f"GET {key}", self._path(key).read_bytes)
        assert isinstance(data, bytes)
        return data

    async def head_object(self, key: str) -> int:
        st = await self._run(f"HEAD {key}", os.stat, self._path(key))
        assert isinstance(st, os.stat_result)
        return st.st_size

    def _list(self, prefix: str) -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        base = self.root
        # walk only the directory the prefix points into
        start_dir = base.joinpath(*prefix.split("/")[:-1]) if "/" in prefix else base
        if not start_dir.is_dir():
            return out
        for dirpath, dirnames, filenames in os.walk(start_dir):
            if Path(dirpath) == base:
                dirnames[:] = [d for d in dirnames if d not in (UPLOADS, _RECYCLED)]
            rel_dir = Path(dirpath).relative_to(base)
            for name in filenames:
                if name.startswith(".") and name.endswith(".tmp"):
                    continue
                key = (rel_dir / name).as_posix() if rel_dir.parts else name
                if key.startswith(prefix):
                    st = os.stat(os.path.join(dirpath, name))
                    out.append(ObjectInfo(key, st.st_size, st.st_mtime))
        out.sort(key=lambda o: o.key)
        return out

    async def list_objects(self, prefix: str) -> list[ObjectInfo]:
        result = await self._run(f"LIST {prefix}", self._list, prefix)
        assert isinstance(result, list)
        return result

    def _delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            path = self._path(key)
            if not self.recycled.offer(path):
                self._maps.forget(path)
                path.unlink(missing_ok=True)

    async def delete_objects(self, keys: Sequence[str]) -> None:
        await self._run(f"DELETE {len(keys)} objects", self._delete, list(keys))

    # ---- multipart (fileuploads.py) ----------------------------------------------------
    def _create(self, key: str, part_size: int) -> str:
        self._path(key)  # validate
        return self._uploads.create(key, part_size)

    async def create_multipart(self, key: str, part_size: int) -> str:
        upload_id = await self._run(f"CREATE-MULTIPART {key}", self._create, key, part_size)
        assert isinstance(upload_id, str)
        return upload_id

    async def upload_part(self, key: str, upload_id: str, part_number: int, data: Pieces) -> str:
        # a part received in place (landed) is in the file already: no thread hop (its CPU
        # and wake-ups) just to record it (docs/performance-log.md, issue 17, session 35)
        etag: object = self._uploads.part_in_place(upload_id, part_number, data)
        if etag is None:
            etag = await self._run(f"UPLOAD-PART {key}#{part_number}",
                                   self._uploads.write_part, upload_id, part_number, data)
        assert isinstance(etag, str)
        return etag

    async def upload_window(self, key: str, upload_id: str, offset: int,
                            length: int) -> memoryview | None:
        # a recycled file's pages come populated with its mapping: then lent here at once
        view: object = self.upload_window_now(key, upload_id, offset, length)
        if view is None:
            view = await self._run(f"WINDOW {key}", self._uploads.window, upload_id, offset,
                                   length)
        assert view is None or isinstance(view, memoryview)
        return view

    def upload_window_now(self, key: str, upload_id: str, offset: int,
                          length: int) -> memoryview | None:
        return self._uploads.window_now(upload_id, offset, length)

    def _complete(self, key: str, upload_id: str, parts: Sequence[tuple[int, str]]) -> None:
        dest = self._path(key)

        def publish(fd: int, length: int, data: Path, maps: list[FileMap]) -> None:
            os.ftruncate(fd, length)
            for fm in maps:
                fm.truncated(length)
            if self.fsync:
                os.fsync(fd)
            dest.parent.mkdir(parents=True, exist_ok=True)
            self._maps.forget(dest)
            os.replace(data, dest)
            self._maps.adopt(dest, maps)  # recycled only once no view of them is left

        self._uploads.complete(upload_id, parts, publish)

    async def complete_multipart(self, key: str, upload_id: str,
                                 parts: Sequence[tuple[int, str]]) -> None:
        await self._run(f"COMPLETE-MULTIPART {key}", self._complete, key, upload_id, list(parts))

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        await self._run(f"ABORT-MULTIPART {key}", self._uploads.remove, upload_id)

    async def list_multipart_uploads(self, prefix: str) -> list[UploadInfo]:
        result = await self._run(f"LIST-UPLOADS {prefix}", self._uploads.list, prefix)
        assert isinstance(result, list)
        return result

    def _free_bytes(self) -> int | None:
        """Bytes available to this process under the root; None if it is not writable."""
        if not os.access(self.root, os.W_OK):
            return None
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize

    async def check(self) -> None:
        try:
            free = await asyncio.to_thread(self._free_bytes)
        except OSError as exc:
            raise BackendUnavailable(f"store directory {self.root}: {exc.strerror}") from exc
        if free is None:
            raise BackendUnavailable(f"store directory {self.root} is missing or not writable")
        free += self.recycled.bytes  # kept for reuse: as good as free
        if free < MIN_FREE:
            raise BackendUnavailable(f"store directory {self.root} is full ({free} bytes "
                                     f"available, under {MIN_FREE})")

    async def close(self) -> None:
        self._maps.clear()
        self.recycled.drop_maps()
