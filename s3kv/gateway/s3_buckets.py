"""S3 bucket operations; a bucket is a store namespace."""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway.bodies import read_small
from s3kv.gateway.objattrs import object_etag
from s3kv.gateway.ops import caller
from s3kv.gateway.requests import Target, max_keys, validate_key
from s3kv.gateway.s3xml import (
    BucketEntry,
    DeleteError,
    ListV2Page,
    ObjectEntry,
    delete_result,
    list_objects_v2,
    location_constraint,
    parse_create_bucket_configuration,
    parse_delete,
)
from s3kv.gateway.s3xml import (
    list_buckets as render_buckets,
)
from s3kv.gateway.state import GatewayState
from s3kv.store.codecs import HEADER_CODEC

XML = "application/xml"
RESERVED = {"healthz", "readyz", "metrics"}
_SUBRESOURCES = {"acl", "policy", "versioning", "tagging", "lifecycle", "cors", "website",
                 "logging", "notification", "replication", "encryption", "object-lock",
                 "ownershipControls", "publicAccessBlock", "uploads", "versions", "accelerate",
                 "requestPayment", "analytics", "inventory", "metrics", "intelligent-tiering"}


async def list_buckets(request: web.Request, st: GatewayState) -> web.StreamResponse:
    created = st.store.namespace_created
    cred = caller(request)
    entries = [BucketEntry(n, created.get(n, 0.0)) for n in st.store.list_namespaces()
               if cred.allows(n)]
    return web.Response(body=render_buckets(entries), content_type=XML)


async def dispatch(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    m = request.method
    q = t.query
    if m == "GET" and "location" in q:
        request["op"] = "GetBucketLocation"
        st.store.ns_id(t.bucket)
        return web.Response(body=location_constraint(None), content_type=XML)
    if m == "POST" and "delete" in q:
        request["op"] = "DeleteObjects"
        return await delete_objects(request, st, t)
    unsupported = _SUBRESOURCES.intersection(q)
    if unsupported:
        request["op"] = "Unsupported"
        raise RequestError("NotImplemented", f"s3kv does not implement the "
                           f"{sorted(unsupported)[0]!r} bucket subresource.", 501)
    if m == "GET":
        request["op"] = "ListObjectsV2"
        return await list_objects(request, st, t)
    if m == "PUT":
        request["op"] = "CreateBucket"
        return await create_bucket(request, st, t)
    if m == "HEAD":
        request["op"] = "HeadBucket"
        st.store.ns_id(t.bucket)
        return web.Response(headers={"x-amz-bucket-region": "us-east-1"})
    if m == "DELETE":
        request["op"] = "DeleteBucket"
        await st.store.delete_namespace(t.bucket)
        return web.Response(status=204)
    raise RequestError("MethodNotAllowed", f"{m} is not allowed on a bucket.", 405)


async def create_bucket(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    body = await read_small(request, st)
    if body.strip():
        parse_create_bucket_configuration(body)
    if t.bucket in RESERVED:
        raise RequestError("InvalidBucketName", f"{t.bucket!r} is reserved by the gateway's "
                           "operations endpoints.")
    await st.store.create_namespace(t.bucket, request.headers.get(HEADER_CODEC))
    return web.Response(headers={"Location": f"/{t.bucket}"})


def _token(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def _untoken(token: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(token.encode())
    except (binascii.Error, ValueError):
        raise RequestError("InvalidArgument", "The continuation token provided is "
                           "incorrect.") from None


async def list_objects(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    q = t.query
    if q.get("list-type", "2") != "2":
        raise RequestError("NotImplemented", "Use ListObjectsV2 (list-type=2).", 501)
    encoding = q.get("encoding-type")
    if encoding not in (None, "url"):
        raise RequestError("InvalidArgument", "encoding-type must be 'url'.")
    prefix = q.get("prefix", "")
    delimiter = q.get("delimiter") or None
    limit = max_keys(q)
    token = q.get("continuation-token")
    start_after = q.get("start-after")
    after = _untoken(token) if token is not None else (start_after or "").encode()
    metas = st.store.list_blocks(t.bucket, prefix.encode(), after, limit=None)
    contents: list[ObjectEntry] = []
    prefixes: list[str] = []
    last = b""
    truncated = False
    pbytes = prefix.encode()
    dbytes = delimiter.encode() if delimiter else b""
    for meta in metas:
        if dbytes:
            rest = meta.key[len(pbytes):]
            cut = rest.find(dbytes)
            if cut >= 0:
                common = meta.key[:len(pbytes) + cut + len(dbytes)]
                if prefixes and prefixes[-1] == common.decode():
                    continue
                if len(contents) + len(prefixes) >= limit:
                    truncated = True
                    break
                prefixes.append(common.decode())
                last = common + b"\xff"  # past every key under this common prefix
                continue
        if len(contents) + len(prefixes) >= limit:
            truncated = True
            break
        contents.append(ObjectEntry(meta.key.decode(), meta.written_at,
                                    object_etag(meta), meta.size))
        last = meta.key
    page = ListV2Page(
        bucket=t.bucket, prefix=prefix, delimiter=delimiter, max_keys=limit,
        contents=contents, common_prefixes=prefixes, is_truncated=truncated,
        continuation_token=token, start_after=start_after, encoding_type=encoding,
        next_continuation_token=_token(last) if truncated else None)
    return web.Response(body=list_objects_v2(page), content_type=XML)


async def delete_objects(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    st.store.ns_id(t.bucket)
    req = parse_delete(await read_small(request, st))
    deleted: list[str] = []
    errors: list[DeleteError] = []
    for key in req.keys:
        try:
            await st.store.delete(t.bucket, validate_key(key))
            deleted.append(key)
        except RequestError as exc:
            errors.append(DeleteError(key, exc.code, str(exc)))
    return web.Response(body=delete_result(deleted, errors, req.quiet), content_type=XML)
