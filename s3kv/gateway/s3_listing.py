"""S3 listings: ListObjects (v1: marker / NextMarker), ListObjectsV2 (continuation tokens,
start-after, fetch-owner), ListObjectVersions (key-marker / NextKeyMarker: versioning is never
enabled, so every object is listed as its one version, ``null``) and ListBuckets (max-buckets,
continuation-token, prefix).

One walk serves the three object listings: keys after a position, in order, rolled up into common
prefixes at the delimiter (each counted once against ``max-keys``, and never repeated on a
later page: a marker that is a common prefix skips every key under it, as S3 does).
``max-keys=0`` is an empty, untruncated page.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import AnyStr

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway.objattrs import object_etag
from s3kv.gateway.ops import caller
from s3kv.gateway.requests import Target, encoding_type, max_keys
from s3kv.gateway.s3xml import (
    XML,
    BucketEntry,
    ListV1Page,
    ListV2Page,
    ObjectEntry,
    VersionsPage,
    list_object_versions,
    list_objects_v1,
    list_objects_v2,
)
from s3kv.gateway.s3xml import list_buckets as render_buckets
from s3kv.gateway.state import GatewayState
from s3kv.store.store import BlockMeta
from s3kv.wire.headers import is_decimal

#: every namespace is in the gateway's one region
REGION = "us-east-1"
MAX_BUCKETS = 10000


def listing_etag(meta: BlockMeta) -> str:
    """The ETag a listing shows for a block: the one HEAD and GET answer (objattrs.py)."""
    return object_etag(meta)


def _token(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def _untoken(token: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(token.encode())
    except (binascii.Error, ValueError):
        raise RequestError("InvalidArgument", "The continuation token provided is "
                           "incorrect.") from None


def common_prefix(key: AnyStr, start: int, delimiter: AnyStr) -> AnyStr | None:
    """The common prefix ``key`` rolls up into: through the first ``delimiter`` at or after
    ``start`` (the listing prefix's length); None without one (or without a delimiter)."""
    cut = key.find(delimiter, start) if delimiter else -1
    return key[:cut + len(delimiter)] if cut >= 0 else None


@dataclass
class Walk:
    contents: list[ObjectEntry]
    prefixes: list[str]
    truncated: bool
    #: the last key or common prefix returned (NextMarker), b"" for none
    last: bytes
    #: where the next page starts (past every key under a returned common prefix)
    resume: bytes


async def walk(st: GatewayState, bucket: str, prefix: str, delimiter: str | None,
               after: bytes, limit: int) -> Walk:
    """At most ``limit`` keys and common prefixes after ``after`` (store/listing.py rolls the
    keys up, in one pass over the bucket's keys)."""
    out = Walk([], [], False, b"", b"")
    if limit == 0:
        return out
    items, out.truncated = await st.store.list_blocks(
        bucket, prefix.encode(), after, limit, delimiter.encode() if delimiter else b"")
    for item in items:
        if isinstance(item, bytes):
            out.prefixes.append(item.decode())
            out.last, out.resume = item, item + b"\xff"
        else:
            out.contents.append(ObjectEntry(item.key.decode(), item.written_at,
                                            listing_etag(item), item.size))
            out.last = out.resume = item.key
    return out


@dataclass(frozen=True)
class _Listing:
    """The query parameters every object listing takes."""

    prefix: str
    delimiter: str | None
    limit: int
    encoding: str | None

    @classmethod
    def of(cls, q: dict[str, str]) -> _Listing:
        return cls(q.get("prefix", ""), q.get("delimiter") or None, max_keys(q),
                   encoding_type(q))

    async def walk(self, st: GatewayState, bucket: str, after: bytes) -> Walk:
        return await walk(st, bucket, self.prefix, self.delimiter, after, self.limit)


async def list_objects_v2_handler(request: web.Request, st: GatewayState,
                                  t: Target) -> web.StreamResponse:
    q = t.query
    ls = _Listing.of(q)
    token = q.get("continuation-token")
    start_after = q.get("start-after")
    w = await ls.walk(st, t.bucket, _untoken(token) if token is not None
                else (start_after or "").encode())
    page = ListV2Page(
        bucket=t.bucket, prefix=ls.prefix, delimiter=ls.delimiter, max_keys=ls.limit,
        contents=w.contents, common_prefixes=w.prefixes, is_truncated=w.truncated,
        continuation_token=token, start_after=start_after, encoding_type=ls.encoding,
        next_continuation_token=_token(w.resume) if w.truncated else None,
        fetch_owner=q.get("fetch-owner") == "true")
    return web.Response(body=list_objects_v2(page), content_type=XML)


async def list_objects_v1_handler(request: web.Request, st: GatewayState,
                                  t: Target) -> web.StreamResponse:
    ls = _Listing.of(t.query)
    marker = t.query.get("marker", "")
    w = await ls.walk(st, t.bucket, marker.encode())
    page = ListV1Page(
        bucket=t.bucket, prefix=ls.prefix, delimiter=ls.delimiter, max_keys=ls.limit,
        marker=marker, contents=w.contents, common_prefixes=w.prefixes,
        is_truncated=w.truncated, encoding_type=ls.encoding,
        # S3 gives NextMarker only with a delimiter; without, clients take the last key
        next_marker=w.last.decode() if w.truncated and ls.delimiter else None)
    return web.Response(body=list_objects_v1(page), content_type=XML)


async def list_object_versions_handler(request: web.Request, st: GatewayState,
                                       t: Target) -> web.StreamResponse:
    """Every object is one version (``null``): the page is ListObjects' after ``key-marker``
    (a ``version-id-marker``, only ``null``, names the marker key's one version, already
    listed)."""
    ls = _Listing.of(t.query)
    key_marker = t.query.get("key-marker", "")
    version_marker = t.query.get("version-id-marker", "")
    if version_marker and not key_marker:
        raise RequestError("InvalidArgument", "A version-id marker cannot be specified without "
                           "a key marker.")
    w = await ls.walk(st, t.bucket, key_marker.encode())
    page = VersionsPage(
        bucket=t.bucket, prefix=ls.prefix, delimiter=ls.delimiter, max_keys=ls.limit,
        contents=w.contents, common_prefixes=w.prefixes, is_truncated=w.truncated,
        encoding_type=ls.encoding, key_marker=key_marker, version_id_marker=version_marker,
        next_key_marker=w.last.decode() if w.truncated else None)
    return web.Response(body=list_object_versions(page), content_type=XML)


async def list_buckets(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    q = t.query
    raw = q.get("max-buckets", str(MAX_BUCKETS))
    if not is_decimal(raw) or not 1 <= int(raw) <= MAX_BUCKETS:
        raise RequestError("InvalidArgument", f"max-buckets must be an integer from 1 to "
                           f"{MAX_BUCKETS}.")
    limit = int(raw)
    prefix = q.get("prefix", "")
    token = q.get("continuation-token")
    after = _untoken(token).decode(errors="replace") if token is not None else ""
    region = q.get("bucket-region")
    created = st.store.namespace_created
    cred = caller(request)
    names = [n for n in st.store.list_namespaces()
             if cred.allows(n) and n.startswith(prefix) and n > after
             and region in (None, REGION)]
    page = names[:limit]
    more = len(names) > limit
    entries = [BucketEntry(n, created.get(n, 0.0)) for n in page]
    body = render_buckets(entries, continuation_token=_token(page[-1].encode()) if more else
                          None, prefix=prefix if "prefix" in q else None)
    return web.Response(body=body, content_type=XML)
