"""S3 object attributes: ETag, content headers, user metadata, flexible checksum, part sizes.

The store keeps them as opaque bytes with the block (index and manifest entry, format version
2: docs/format.md); this module is their only encoder and decoder. The encoding is a list of
fields ``tag u8, length u16 (little-endian), value``; unknown tags are skipped, so later
versions can add fields that older gateways ignore.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from email.utils import formatdate
from typing import NamedTuple

from s3kv.errors import RequestError
from s3kv.store import layout
from s3kv.store.store import BlockMeta
from s3kv.wire.headers import HeaderValues, comma_list

#: S3's limit on user metadata: the UTF-8 bytes of every name (without x-amz-meta-) and value
MAX_USER_METADATA = 2048
META_PREFIX = "x-amz-meta-"
#: the content headers S3 stores with an object and returns on GET/HEAD, in response order
CONTENT_HEADERS = ("Content-Type", "Cache-Control", "Content-Disposition", "Content-Encoding",
                   "Content-Language", "Expires")
_CONTENT_LOWER = tuple((h, h.lower()) for h in CONTENT_HEADERS)
#: GET/HEAD query parameters that override a stored header in the answer
RESPONSE_OVERRIDES = {f"response-{h.lower()}": h for h in CONTENT_HEADERS}
DEFAULT_CONTENT_TYPE = "binary/octet-stream"

_T_ETAG = 1
_T_HEADER = {h: 2 + i for i, h in enumerate(CONTENT_HEADERS)}  # tags 2..7
_HEADER_OF = {t: h for h, t in _T_HEADER.items()}
_T_META = 0x10
_T_CHECKSUM = 0x20
_T_PARTS = 0x30
_FIELD = struct.Struct("<BH")


def _enc(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def _dec(raw: bytes) -> str:
    return raw.decode("utf-8", errors="surrogateescape")


class Checksum(NamedTuple):
    algorithm: str  # crc32, crc32c, crc64nvme, sha1, sha256
    value: str  # base64, with "-N" for a multipart composite
    type: str = "FULL_OBJECT"  # or COMPOSITE

    def headers(self) -> dict[str, str]:
        """As an answer's headers: ``x-amz-checksum-<algorithm>`` and ``x-amz-checksum-type``."""
        return {f"x-amz-checksum-{self.algorithm}": self.value, "x-amz-checksum-type": self.type}


class ObjectAttrs(NamedTuple):
    etag: str = ""  # unquoted; "" for a block written without one (native API, --etag fast)
    headers: tuple[tuple[str, str], ...] = ()  # (canonical content header name, value)
    meta: tuple[tuple[str, str], ...] = ()  # (user metadata name without prefix, value)
    checksum: Checksum | None = None
    parts: tuple[int, ...] = ()  # part sizes of a multipart object, in order

    def stamped(self, etag: str, checksum: Checksum | None,
                parts: tuple[int, ...] = ()) -> ObjectAttrs:
        """These attributes with what the body's bytes decided: its ETag, checksum and (of a
        multipart object) part sizes."""
        return ObjectAttrs(etag, self.headers, self.meta, checksum, parts)

    def encode(self) -> bytes:
        out = bytearray()

        def put(tag: int, value: bytes) -> None:
            if len(value) > 0xFFFF:
                raise _too_large()
            out.extend(_FIELD.pack(tag, len(value)))
            out.extend(value)

        if self.etag:
            put(_T_ETAG, self.etag.encode())
        for name, value in self.headers:
            put(_T_HEADER[name], _enc(value))
        for name, value in self.meta:
            put(_T_META, _enc(name) + b"\0" + _enc(value))
        if self.checksum is not None:
            c = self.checksum
            put(_T_CHECKSUM, f"{c.algorithm}\0{c.type}\0{c.value}".encode())
        if self.parts:
            put(_T_PARTS, struct.pack(f"<{len(self.parts)}I", *self.parts))
        if len(out) > layout.MAX_ATTRS_BYTES:
            raise _too_large()
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> ObjectAttrs:
        """Attributes from their bytes; a truncated field ends the list (the manifest's CRC
        already vouches for the bytes, so this only guards against a foreign encoder)."""
        etag = ""
        headers: list[tuple[str, str]] = []
        meta: list[tuple[str, str]] = []
        checksum = None
        parts: tuple[int, ...] = ()
        pos = 0
        while pos + _FIELD.size <= len(data):
            tag, n = _FIELD.unpack_from(data, pos)
            pos += _FIELD.size
            value = data[pos:pos + n]
            pos += n
            if len(value) != n:
                break
            if tag == _T_ETAG:
                etag = value.decode("ascii", errors="replace")
            elif tag in _HEADER_OF:
                headers.append((_HEADER_OF[tag], _dec(value)))
            elif tag == _T_META:
                name, _, text = value.partition(b"\0")
                meta.append((_dec(name), _dec(text)))
            elif tag == _T_CHECKSUM:
                fields = value.decode("ascii", errors="replace").split("\0")
                if len(fields) == 3:
                    checksum = Checksum(fields[0], fields[2], fields[1])
            elif tag == _T_PARTS and n % 4 == 0:
                parts = struct.unpack(f"<{n // 4}I", value)
        return cls(etag, tuple(headers), tuple(meta), checksum, parts)


def _too_large() -> RequestError:
    return RequestError("MetadataTooLarge", "Your metadata headers exceed the maximum allowed "
                        "metadata size.")


#: attributes up to this size are decoded once and remembered (at most ~1 MiB in all)
_REMEMBERED_ATTRS_BYTES = 512


def attrs_of(meta: BlockMeta) -> ObjectAttrs:
    if not meta.attrs:
        return ObjectAttrs()
    if len(meta.attrs) <= _REMEMBERED_ATTRS_BYTES:
        return _decoded(meta.attrs)
    return ObjectAttrs.decode(meta.attrs)


@functools.lru_cache(maxsize=1024)
def _decoded(data: bytes) -> ObjectAttrs:
    """ObjectAttrs.decode, remembered: objects often share their attributes (the same content
    type, no metadata), and ObjectAttrs is immutable."""
    return ObjectAttrs.decode(data)


@functools.lru_cache(maxsize=1024)
def http_date(seconds: int) -> str:
    """An HTTP date (Last-Modified), remembered per second."""
    return formatdate(seconds, usegmt=True)


def fast_etag(crc: int, size: int) -> str:
    """The ETag of ``--etag fast`` (and of blocks written by the native API): CRC-32 and size."""
    return f"{crc:08x}{size:x}"


def object_etag(meta: BlockMeta, attrs: ObjectAttrs | None = None) -> str:
    """The object's ETag, quoted, as every answer (PUT, Complete, GET, HEAD, LIST) gives it."""
    a = attrs if attrs is not None else attrs_of(meta)
    return f'"{a.etag or fast_etag(meta.crc, meta.size)}"'


def stored_content_encoding(heads: HeaderValues) -> str | None:
    """The Content-Encoding to store with the object: the client's, less ``aws-chunked``."""
    return ",".join(c for c in comma_list(heads, "content-encoding") if c != "aws-chunked") or None


def from_request(heads: HeaderValues) -> ObjectAttrs:
    """The content headers and user metadata of a PUT or CreateMultipartUpload request.

    Raises MetadataTooLarge past S3's 2 KiB of user metadata."""
    kept: list[tuple[str, str]] = []
    for name, low in _CONTENT_LOWER:
        if low == "content-encoding":
            value = stored_content_encoding(heads)
            if value is not None:
                kept.append((name, value))
        elif found := heads.get(low):
            kept.append((name, found[0]))
    meta: dict[str, str] = {}
    for low, values in heads.items():
        if low.startswith(META_PREFIX) and len(low) > len(META_PREFIX):
            meta[low[len(META_PREFIX):]] = ",".join(values)
    if meta and sum(len(_enc(k)) + len(_enc(v)) for k, v in meta.items()) > MAX_USER_METADATA:
        raise RequestError("MetadataTooLarge", "Your metadata headers exceed the maximum "
                           f"allowed metadata size ({MAX_USER_METADATA} bytes of user metadata).")
    return ObjectAttrs(headers=tuple(kept), meta=tuple(sorted(meta.items())))


def response_headers(meta: BlockMeta, attrs: ObjectAttrs, query: Mapping[str, str],
                     *, checksum: bool) -> dict[str, str]:
    """Headers of a GET/HEAD answer: stored content headers (overridden by ``response-*``
    query parameters), user metadata, and the checksum if asked for (``checksum``)."""
    out = {"ETag": object_etag(meta, attrs),
           "Last-Modified": http_date(int(meta.written_at)),
           "Accept-Ranges": "bytes"}
    stored = dict(attrs.headers)
    stored.setdefault("Content-Type", DEFAULT_CONTENT_TYPE)
    for param, name in RESPONSE_OVERRIDES.items():
        if param in query:
            stored[name] = query[param]
    for name in CONTENT_HEADERS:
        if name in stored:
            out[name] = stored[name]
    for name, value in attrs.meta:
        out[META_PREFIX + name] = value
    if checksum and attrs.checksum is not None:
        out.update(attrs.checksum.headers())
    return out
