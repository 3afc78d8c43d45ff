"""Reading S3 requests: bucket and key (path-style or virtual-hosted), key rules, ranges, the
codec a PUT asks for."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import parse_qsl, unquote

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.store.codecs import CODEC_HEADERS, CodecSpec, codec_from_headers
from s3kv.wire.headers import HeaderValues, is_decimal, last_of

MAX_KEY_BYTES = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_DOT_SEGMENTS = frozenset({".", ".."})


class Target(NamedTuple):
    bucket: str  # "" for the service (ListBuckets)
    key: str  # "" for bucket operations
    query: dict[str, str]
    raw_path: str  # as sent, without the query (what SigV4 signed)
    raw_query: str
    virtual: bool = False  # the bucket came from the Host header (virtual-hosted style)


def codec_of(heads: HeaderValues, default: CodecSpec | None) -> CodecSpec | None:
    """The codec a PUT asks for: the namespace's ``default``, refined by its ``x-s3kv-*``
    headers (s3kv/store/codecs/spec.py)."""
    return codec_from_headers(last_of(heads, CODEC_HEADERS), default)


def parse_target(request: web.Request, domain: str) -> Target:
    raw_path, _, raw_query = request.raw_path.partition("?")
    try:
        # strict: unquote's default turns invalid UTF-8 into U+FFFD, so %FF and %FE would
        # silently name the same key
        path = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        raise RequestError("InvalidURI", "Couldn't parse the specified URI: the path is not "
                           "valid UTF-8 once percent-decoded.") from None
    query = dict(parse_qsl(raw_query, keep_blank_values=True)) if raw_query else {}
    host = (request.host or "").split(":")[0].lower()
    if domain and host.endswith("." + domain.lower()):
        bucket = host[: -len(domain) - 1]
        key = path[1:]
        return Target(bucket, key, query, raw_path, raw_query, virtual=True)
    bucket, _, key = path[1:].partition("/")
    return Target(bucket, key, query, raw_path, raw_query)


def validate_key(key: str) -> bytes:
    """S3 object key -> store key bytes. Rejects what cannot be a safe, unambiguous key."""
    raw = key.encode("utf-8", errors="surrogatepass")
    if not raw or len(raw) > MAX_KEY_BYTES:
        raise RequestError("KeyTooLongError" if raw else "InvalidArgument",
                           f"Object keys must be 1 to {MAX_KEY_BYTES} bytes of UTF-8.")
    if _CONTROL.search(key):
        raise RequestError("InvalidArgument", "Object keys must not contain control characters.")
    if not _DOT_SEGMENTS.isdisjoint(key.split("/")):
        raise RequestError("InvalidArgument",
                           "Object keys must not contain '.' or '..' path segments.")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError("InvalidArgument", "Object keys must be valid UTF-8.") from None
    return raw


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """A GET's or HEAD's ``Range: bytes=a-b`` -> (start, end exclusive); None for the whole
    object.

    As S3 (and RFC 9110, which lets a server ignore a Range it cannot use): a header that is
    not one valid byte range (not ``bytes=``, no digits, the last byte before the first, or
    several ranges, which S3 does not serve) is ignored and the whole object comes back with
    200; a valid range that starts at or past the end is 416 InvalidRange, and so is every
    range of an empty object (no byte to name: ``Content-Range: bytes */0``)."""
    if header is None:
        return None
    m = _RANGE.match(header.strip())
    if not m or (not m.group(1) and not m.group(2)):
        return None
    first, last = m.group(1), m.group(2)
    if not first:  # suffix
        n = int(last)
        if n == 0 or size == 0:
            raise _unsatisfiable(size)
        return max(0, size - n), size
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        raise _unsatisfiable(size)
    end = size - 1 if not last else min(int(last), size - 1)
    return start, end + 1


def _unsatisfiable(size: int) -> RequestError:
    return RequestError("InvalidRange", "The requested range is not satisfiable", 416,
                        {"Content-Range": f"bytes */{size}"})


DURABILITY_HEADER = "x-s3kv-durability"


def durability(request: web.Request) -> bool:
    """``x-s3kv-durability: sealed`` asks to be answered once the block is on the backend."""
    value = request.headers.get(DURABILITY_HEADER, "").strip().lower()
    if value not in ("", "sealed", "memory"):
        raise RequestError("InvalidArgument", f"{DURABILITY_HEADER} must be 'sealed' or "
                           "'memory'.")
    return value == "sealed"


def encoding_type(query: dict[str, str]) -> str | None:
    """A listing's ``encoding-type``: ``url`` or None; InvalidArgument for anything else."""
    encoding = query.get("encoding-type")
    if encoding not in (None, "url"):
        raise RequestError("InvalidArgument", "encoding-type must be 'url'.")
    return encoding


def max_keys(query: Mapping[str, str], name: str = "max-keys") -> int:
    """A listing's page size (``max-keys``, ``max-parts``, ``max-uploads``; the query's or,
    as GetObjectAttributes' ``x-amz-max-parts``, the headers'): 0 to 1000."""
    raw = query.get(name, "1000")
    if not is_decimal(raw.removeprefix("-")):
        raise RequestError("InvalidArgument", f"{name} must be an integer")
    value = int(raw)
    if value < 0:
        raise RequestError("InvalidArgument", f"{name} must not be negative")
    return min(value, 1000)


def part_number_marker(values: Mapping[str, str], name: str = "part-number-marker") -> int:
    """The part after which a listing of parts starts (ListParts' query parameter,
    GetObjectAttributes' ``x-amz-part-number-marker`` header): 0 if absent."""
    raw = values.get(name, "0")
    if not is_decimal(raw):
        raise RequestError("InvalidArgument", f"{name} must be a non-negative integer.")
    return int(raw)
