"""Server-side copies: CopyObject, and the source side of UploadPartCopy (multipart.py stores
the part).

The source is named by ``x-amz-copy-source`` (``bucket/key`` or ``/bucket/key``, URL-encoded,
``?versionId=null`` accepted: the one version every object has). The caller must be allowed
to read the source's namespace as well as to write the destination's. The source's
``x-amz-copy-source-if-*`` conditions are evaluated against the source as read (any that does
not hold: 412 PreconditionFailed). The bytes are read whole (within the request memory budget:
an object is one block of at most ``max_block_size``) and put as a new block, so the copy is
independent of its source from then on.

CopyObject's ``x-amz-metadata-directive``: ``COPY`` (the default) keeps the source's content
headers and user metadata and ignores the request's; ``REPLACE`` takes them from the request.
A copy onto itself must ``REPLACE`` or name a storage class (S3's rule: a copy that changes
nothing is refused; one with ``x-amz-storage-class`` is taken even when the class stays the same,
as ``rclone settier STANDARD`` and ``aws s3 cp --storage-class`` rely on). The copy keeps the
source's ETag and flexible checksum, except that a multipart source's composite ETag and
checksum describe its parts, which the copy does not have: its ETag is then the MD5 of
its bytes (``--etag fast``: the CRC-based one) and a composite checksum is dropped. A copy
request's ``x-amz-checksum-algorithm`` gets the copy a full-object checksum of that algorithm.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway import objattrs
from s3kv.gateway.access import check_namespace
from s3kv.gateway.body_headers import checksum_algorithm
from s3kv.gateway.checksums import digest_b64
from s3kv.gateway.classify import require_null_version
from s3kv.gateway.conditions import (
    NOT_MODIFIED,
    check_read,
    check_write,
    is_conditional_write,
    precondition_failed,
)
from s3kv.gateway.objattrs import Checksum, ObjectAttrs, attrs_of, object_etag
from s3kv.gateway.ops import caller
from s3kv.gateway.requests import Target, codec_of, durability, validate_key
from s3kv.gateway.s3xml import XML, copy_result
from s3kv.gateway.state import GatewayState
from s3kv.gateway.translate import unread
from s3kv.store.blocks import as_block
from s3kv.store.store import BlockMeta
from s3kv.wire.headers import index_headers, is_decimal

SOURCE_HEADER = "x-amz-copy-source"
#: the source's conditions, as the read conditions they are (conditions.check_read)
_SOURCE_CONDITIONS = {
    "x-amz-copy-source-if-match": "If-Match",
    "x-amz-copy-source-if-none-match": "If-None-Match",
    "x-amz-copy-source-if-modified-since": "If-Modified-Since",
    "x-amz-copy-source-if-unmodified-since": "If-Unmodified-Since",
}


@dataclass(frozen=True)
class CopySource:
    bucket: str
    key: str


@dataclass(frozen=True)
class SourceBlock:
    meta: BlockMeta
    attrs: ObjectAttrs
    data: bytes | memoryview


def _bad_source(why: str) -> RequestError:
    return RequestError("InvalidArgument", f"Invalid copy source: {why} (x-amz-copy-source "
                        "is the URL-encoded source-bucket/source-key).")


def parse_source(value: str) -> CopySource:
    """``x-amz-copy-source``: ``[/]bucket/key[?versionId=null]``, URL-encoded."""
    path, _, query = value.strip().partition("?")
    bucket, _, key = unquote(path).lstrip("/").partition("/")
    if bucket.startswith("arn:"):
        raise RequestError("NotImplemented", "s3kv does not implement access points or outposts "
                           "as a copy source: name the source bucket.", 501)
    if not bucket or not key:
        raise _bad_source("it names no bucket or no key")
    if query:
        params = parse_qs(query, keep_blank_values=True)
        versions: list[str | None] = list(params.pop("versionId", [None]))
        if params or len(versions) != 1:
            raise RequestError("NotImplemented", "s3kv does not implement a copy source's query "
                               "other than one versionId.", 501)
        require_null_version(versions[0], "a copy source's versionId")
    return CopySource(bucket, key)


def _check_source_conditions(request: web.Request, meta: BlockMeta, etag: str) -> None:
    """The source's x-amz-copy-source-if-* headers; 412 for any that does not hold."""
    asked = {read: request.headers[name] for name, read in _SOURCE_CONDITIONS.items()
             if name in request.headers}
    if asked and check_read(asked, etag, meta.written_at) == NOT_MODIFIED:
        raise precondition_failed("x-amz-copy-source-if-none-match or -if-modified-since")


def resolve_source(request: web.Request) -> tuple[CopySource, bytes]:
    """The copy source named by the request and its store key, once the caller is known to be
    allowed to read its namespace (before anything says whether it exists)."""
    src = parse_source(request.headers[SOURCE_HEADER])
    check_namespace(caller(request), src.bucket)
    return src, validate_key(src.key)


async def _read_source(request: web.Request, st: GatewayState, src: CopySource,
                      key: bytes) -> SourceBlock:
    """The source's bytes, its conditions evaluated against the version read: the one the
    index holds now, even if the source is written again before its bytes come (the caller
    holds the memory for them: :func:`read_reserved`)."""
    meta = st.store.head(src.bucket, key)
    if meta is None:
        raise RequestError("NoSuchKey", "The specified key does not exist.", 404)
    attrs = attrs_of(meta)
    _check_source_conditions(request, meta, object_etag(meta, attrs))
    data = await st.store.read(src.bucket, key)  # the version head() just named
    if data is None:  # evicted or corrupt (404), or the backend failing (503)
        raise unread(st.store.head(src.bucket, key) is not None)
    return SourceBlock(meta, attrs, as_block(data))


async def read_reserved(request: web.Request, st: GatewayState, src: CopySource,
                        key: bytes) -> tuple[SourceBlock, int]:
    """The source read within the request memory budget: (its block, the bytes reserved for
    it, which the caller releases). 503 SlowDown, nothing held, when the budget has no room;
    NoSuchBucket if the source's namespace does not exist."""
    meta = st.store.head(src.bucket, key)
    reserved = st.budget.reserve(meta.size if meta is not None else 0)
    try:
        source = await _read_source(request, st, src, key)
        if source.meta.size > reserved:  # overwritten by a larger object since reserved
            reserved += st.budget.reserve(source.meta.size - reserved)
    except BaseException:
        st.budget.release(reserved)
        raise
    return source, reserved


def _directive(request: web.Request) -> str:
    value = request.headers.get("x-amz-metadata-directive", "COPY").strip().upper()
    if value not in ("COPY", "REPLACE"):
        raise RequestError("InvalidArgument", "Unknown metadata directive: "
                           "x-amz-metadata-directive is COPY or REPLACE.")
    return value


def _md5_hex(data: bytes | memoryview) -> str:
    return hashlib.md5(data).hexdigest()


async def _copy_attrs(st: GatewayState, source: SourceBlock, base: ObjectAttrs,
                      algorithm: str | None) -> ObjectAttrs:
    """``base`` (the copy's content headers and metadata) stamped with the copy's ETag and
    checksum (see the module's docstring); ``algorithm``: a checksum the request asks for."""
    have = source.attrs
    etag, checksum = have.etag, have.checksum
    if have.parts:
        etag = await asyncio.to_thread(_md5_hex, source.data) if st.settings.etag == "md5" \
            else ""
        checksum = checksum if checksum and checksum.type == "FULL_OBJECT" else None
    if algorithm is not None and (checksum is None or checksum.algorithm != algorithm):
        value = await asyncio.to_thread(digest_b64, algorithm, source.data)
        checksum = Checksum(algorithm, value, "FULL_OBJECT")
    return base.stamped(etag, checksum)


async def copy_object(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    key = validate_key(t.key)
    st.store.ns_id(t.bucket)  # NoSuchBucket before the source is read
    heads = index_headers(request.headers)
    directive = _directive(request)
    src, src_key = resolve_source(request)
    if (src.bucket, src_key) == (t.bucket, key) and directive == "COPY" \
            and "x-amz-storage-class" not in request.headers:
        raise RequestError("InvalidRequest", "This copy request is illegal because it is trying "
                           "to copy an object to itself without changing the object's metadata, "
                           "storage class, website redirect location or encryption attributes.")
    base = objattrs.from_request(heads) if directive == "REPLACE" else None
    codec = codec_of(heads, st.store.namespace_codecs[t.bucket])
    algorithm = checksum_algorithm(request.headers.get("x-amz-checksum-algorithm"))
    source, reserved = await read_reserved(request, st, src, src_key)
    try:
        attrs = await _copy_attrs(st, source, base if base is not None else source.attrs,
                                  algorithm)
        blob = attrs.encode()
        async with st.key_locks.hold(t.bucket, key):
            if is_conditional_write(request.headers):
                current = st.store.head(t.bucket, key)
                check_write(request.headers, None if current is None else object_etag(current))
            meta = await st.store.put(t.bucket, key, source.data, durable=durability(request),
                                      codec=codec, attrs=blob)
    finally:
        st.budget.release(reserved)
    c = attrs.checksum
    body = copy_result("CopyObjectResult", object_etag(meta, attrs), meta.written_at, c)
    return web.Response(body=body, content_type=XML, headers=c.headers() if c else {})


def source_range(request: web.Request, size: int) -> tuple[int, int]:
    """UploadPartCopy's ``x-amz-copy-source-range: bytes=first-last`` as [start, end) of a
    source of ``size`` bytes (the whole source without it)."""
    raw = request.headers.get("x-amz-copy-source-range")
    if raw is None:
        return 0, size
    unit, _, span = raw.strip().partition("=")
    first, dash, last = span.partition("-")
    if unit != "bytes" or not dash or not is_decimal(first) or not is_decimal(last) \
            or int(first) > int(last):
        raise RequestError("InvalidArgument", "The x-amz-copy-source-range value must be of the "
                           "form bytes=first-last where first and last are the zero-based "
                           "offsets of the first and last bytes to copy.")
    if int(last) >= size:
        raise RequestError("InvalidRange", "The requested range is not satisfiable: the copy "
                           f"source is {size} bytes.", 416, {"Content-Range": f"bytes */{size}"})
    return int(first), int(last) + 1
