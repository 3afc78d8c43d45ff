"""Per-operation records in Warp's ``.csv.zst`` format (see docs/warp-records.md).

A record file is zstd-compressed, tab-separated text: one header line with Warp's columns
(``idx thread op client_id n_objects bytes endpoint file error start first_byte end
duration_ns cat``) followed by s3kv's two extra columns ``http_status`` and ``retries``, one line
per operation, and ``#`` comment lines at the end. Warp reads columns by name, so
``warp analyze --full`` reads these files and ignores the extra columns. Records are written
as operations complete, and a zstd block is flushed every second, so an interrupted run keeps
almost everything it measured.
"""

from __future__ import annotations

import calendar
import codecs
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import zstandard

from s3kv.errors import ConfigError

WARP_COLUMNS = ("idx", "thread", "op", "client_id", "n_objects", "bytes", "endpoint", "file",
                "error", "start", "first_byte", "end", "duration_ns", "cat")
EXTRA_COLUMNS = ("http_status", "retries")
HEADER = "\t".join(WARP_COLUMNS + EXTRA_COLUMNS) + "\n"

#: error text of an operation whose bytes did not match what was written
VERIFY_PREFIX = "verify: "
FLUSH_EVERY_S = 1.0
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass(slots=True)
class Record:
    """One operation. Times are wall-clock nanoseconds since the epoch (UTC)."""

    op: str
    thread: int
    client_id: str
    endpoint: str
    file: str
    size: int
    start_ns: int
    end_ns: int
    first_byte_ns: int = 0  # 0: none (Warp leaves the column empty)
    error: str = ""
    http_status: int = 0
    retries: int = 0
    n_objects: int = 1
    cat: int = 0

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def verify_failed(self) -> bool:
        return self.error.startswith(VERIFY_PREFIX)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def ttfb_ns(self) -> int | None:
        return self.first_byte_ns - self.start_ns if self.first_byte_ns else None

    def shifted(self, ns: int) -> Record:
        """This record with its times moved by ``ns`` (onto another host's clock)."""
        return replace(self, start_ns=self.start_ns + ns, end_ns=self.end_ns + ns,
                       first_byte_ns=self.first_byte_ns + ns if self.first_byte_ns else 0)


# ---- time stamps --------------------------------------------------------------------------
_last_sec = -1
_last_text = ""


def format_time(ns: int) -> str:
    """RFC 3339 with nanoseconds in UTC, as Go's ``time.RFC3339Nano`` parses it."""
    global _last_sec, _last_text
    sec, frac = divmod(ns, 1_000_000_000)
    if sec != _last_sec:
        _last_sec, _last_text = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    return f"{_last_text}.{frac:09d}Z"


_TIME_RE = re.compile(
    r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def parse_time(text: str) -> int:
    m = _TIME_RE.match(text)
    if not m:
        raise ValueError(f"bad time stamp {text!r}")
    y, mo, d, h, mi, s, frac, tz = m.groups()
    sec = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s), 0, 0, 0))
    if tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        sec -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return sec * 1_000_000_000 + int((frac or "0").ljust(9, "0"))


def _clean(text: str) -> str:
    # Go's csv reader (Warp) must see no quotes, tabs or newlines in a field.
    return text.replace("\t", " ").replace("\n", " ").replace("\r", " ").replace('"', "'")


def format_record(idx: int, r: Record) -> str:
    fb = format_time(r.first_byte_ns) if r.first_byte_ns else ""
    return (f"{idx}\t{r.thread}\t{r.op}\t{r.client_id}\t{r.n_objects}\t{r.size}\t"
            f"{_clean(r.endpoint)}\t{_clean(r.file)}\t{_clean(r.error)}\t"
            f"{format_time(r.start_ns)}\t{fb}\t{format_time(r.end_ns)}\t{r.duration_ns}\t{r.cat}\t"
            f"{r.http_status}\t{r.retries}\n")


# ---- writing ------------------------------------------------------------------------------
class RecordWriter:
    """Appends records to a ``.csv.zst`` file as they come; ``close()`` ends the frame."""

    def __init__(self, path: str | Path, level: int = 3) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[bytes] = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._z = zstandard.ZstdCompressor(level=level).stream_writer(self._fh, closefd=False)
        self._z.write(HEADER.encode())
        self._idx = 0
        self._last_flush = time.monotonic()
        self.closed = False

    @property
    def count(self) -> int:
        return self._idx

    def write(self, record: Record) -> None:
        self._z.write(format_record(self._idx, record).encode())
        self._idx += 1
        now = time.monotonic()
        if now - self._last_flush >= FLUSH_EVERY_S:
            self.flush()
            self._last_flush = now

    def flush(self) -> None:
        self._z.flush(zstandard.FLUSH_BLOCK)
        self._fh.flush()

    def close(self, comment: str = "") -> None:
        if self.closed:
            return
        for line in comment.splitlines():
            self._z.write(f"# {line}\n".encode())
        self._z.flush(zstandard.FLUSH_FRAME)
        self._z.close()  # type: ignore[no-untyped-call]
        self._fh.close()
        self.closed = True


def write_records(path: str | Path, records: Iterable[Record], comment: str = "") -> int:
    w = RecordWriter(path)
    try:
        for r in records:
            w.write(r)
    finally:
        w.close(comment)
    return w.count


# ---- reading ------------------------------------------------------------------------------
_READ = 1 << 20


def _bytes(path: Path) -> Iterator[bytes]:
    """The file's bytes, decompressed when it is zstd (frames one after another). A frame cut
    short, by a writer that was killed, ends with its last whole block."""
    with open(path, "rb") as fh:
        data = fh.read(_READ)
        if not data.startswith(_ZSTD_MAGIC):
            while data:
                yield data
                data = fh.read(_READ)
            return
        d = zstandard.ZstdDecompressor().decompressobj()
        while data:
            try:
                out = d.decompress(data)
            except zstandard.ZstdError:
                return  # damaged past this point: keep what came before
            if out:
                yield out
            if d.eof:  # the frame ended; what follows it is the next one's
                data, d = d.unused_data, zstandard.ZstdDecompressor().decompressobj()
                if data:
                    continue
            data = fh.read(_READ)


def _lines(path: Path) -> Iterator[str]:
    """The file's lines; the last one without its newline if the writer stopped mid-line."""
    text = codecs.getincrementaldecoder("utf-8")()
    tail = ""
    try:
        for data in _bytes(path):
            lines = (tail + text.decode(data)).split("\n")
            tail = lines.pop()
            yield from (line + "\n" for line in lines)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a Warp record file (not UTF-8 text)") from None
    if tail:
        yield tail


def read_records(path: str | Path) -> list[Record]:
    """Read a record file: ours, or any Warp ``.csv``/``.csv.zst`` (columns found by name)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a directory: name its record files ({path}/*.csv.zst)")
    if not path.is_file():
        raise ConfigError(f"no such record file: {path}")
    lines = _lines(path)
    header = next(lines, "").rstrip("\n").split("\t")
    col = {name: i for i, name in enumerate(header)}
    missing = {"op", "bytes", "start", "end", "error", "thread"} - col.keys()
    if missing:
        raise ConfigError(f"{path}: not a Warp record file (missing {', '.join(sorted(missing))})")

    def opt(values: list[str], name: str) -> str:
        i = col.get(name)
        return values[i] if i is not None and i < len(values) else ""

    out: list[Record] = []
    for n, line in enumerate(lines, start=2):
        if line.startswith("#") or not line.endswith("\n"):
            continue  # comments, and a last line cut short by an interrupted writer
        v = line.rstrip("\n").split("\t")
        if len(v) < len(header):
            continue
        try:
            out.append(_record(v, opt, col))
        except ValueError as exc:
            raise ConfigError(f"{path}: line {n} is no record ({exc})") from None
    return out


def _record(v: list[str], opt: Callable[[list[str], str], str], col: dict[str, int]) -> Record:
    fb = opt(v, "first_byte")
    return Record(
        op=v[col["op"]], thread=int(v[col["thread"]]), client_id=opt(v, "client_id"),
        endpoint=opt(v, "endpoint"), file=opt(v, "file"), size=int(v[col["bytes"]]),
        start_ns=parse_time(v[col["start"]]), end_ns=parse_time(v[col["end"]]),
        first_byte_ns=parse_time(fb) if fb else 0, error=v[col["error"]],
        http_status=int(opt(v, "http_status") or 0), retries=int(opt(v, "retries") or 0),
        n_objects=int(opt(v, "n_objects") or 1), cat=int(opt(v, "cat") or 0))


def read_comments(path: str | Path) -> list[str]:
    return [line[2:].rstrip("\n") for line in _lines(Path(path)) if line.startswith("# ")]
