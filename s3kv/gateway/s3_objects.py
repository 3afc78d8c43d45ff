"""S3 object operations: PutObject, GetObject (ranges), HeadObject, DeleteObject, and the
multipart calls (delegated to multipart.py)."""

from __future__ import annotations

from email.utils import formatdate

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway import multipart
from s3kv.gateway.bodies import read_body
from s3kv.gateway.requests import Target, durability, parse_range, validate_key
from s3kv.gateway.s3_buckets import etag_of
from s3kv.gateway.state import GatewayState
from s3kv.store.codecs import codec_from_headers
from s3kv.store.store import BlockMeta
from s3kv.wire.body import SLICE


async def dispatch(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    m = request.method
    q = t.query
    if m == "PUT" and "x-amz-copy-source" in request.headers:  # CopyObject / UploadPartCopy
        request["op"] = "CopyObject"
        raise RequestError("NotImplemented", "s3kv does not implement CopyObject.", 501)
    if m == "POST" and "uploads" in q:
        request["op"] = "CreateMultipartUpload"
        return await multipart.create(request, st, t)
    if "uploadId" in q:
        return await multipart.dispatch(request, st, t)
    if m == "PUT":
        request["op"] = "PutObject"
        return await put_object(request, st, t)
    if m in ("GET", "HEAD"):
        request["op"] = "GetObject" if m == "GET" else "HeadObject"
        return await get_object(request, st, t, head=m == "HEAD")
    if m == "DELETE":
        request["op"] = "DeleteObject"
        st.store.ns_id(t.bucket)
        await st.store.delete(t.bucket, validate_key(t.key))
        return web.Response(status=204)
    raise RequestError("MethodNotAllowed", f"{m} is not allowed on an object.", 405)


async def put_object(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    key = validate_key(t.key)
    st.store.ns_id(t.bucket)  # NoSuchBucket before reading a byte
    durable = durability(request)
    codec = codec_from_headers(request.headers, st.store.namespace_codecs[t.bucket])
    body = await read_body(request, st, st.settings.max_block_size)
    try:
        meta = await st.store.put(t.bucket, key, body.data, durable=durable, codec=codec)
    finally:
        st.budget.release(body.reserved)
    headers = {"ETag": etag_of(meta.crc, meta.size)}
    for algo, value in body.result.checksums.items():
        headers[f"x-amz-checksum-{algo}"] = value
    return web.Response(headers=headers)


def object_headers(meta: BlockMeta) -> dict[str, str]:
    return {
        "ETag": etag_of(meta.crc, meta.size),
        "Last-Modified": formatdate(meta.written_at, usegmt=True),
        "Accept-Ranges": "bytes",
        "Content-Type": "application/octet-stream",
    }


async def get_object(request: web.Request, st: GatewayState, t: Target, *,
                     head: bool) -> web.StreamResponse:
    key = validate_key(t.key)
    meta = st.store.head(t.bucket, key)
    if meta is None:
        raise RequestError("NoSuchKey", "The specified key does not exist.", 404)
    rng = parse_range(request.headers.get("Range"), meta.size)
    headers = object_headers(meta)
    status = 200
    start, end = 0, meta.size
    if rng is not None:
        start, end = rng
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{meta.size}"
    if head:
        headers["Content-Length"] = str(end - start)
        return web.Response(status=status, headers=headers)
    data = await st.store.get(t.bucket, key)
    if data is None:  # evicted, corrupt or backend down since the index said yes: a miss
        raise RequestError("NoSuchKey", "The specified key does not exist.", 404)
    view = memoryview(data)[start:end]
    st.metrics.bytes_out.inc(len(view))
    if len(view) <= SLICE:
        return web.Response(status=status, body=view, headers=headers)
    resp = web.StreamResponse(status=status, headers=headers)
    resp.content_length = len(view)
    await resp.prepare(request)
    await write_sliced(resp, view)
    await resp.write_eof()
    return resp


async def write_sliced(resp: web.StreamResponse, data: bytes | memoryview) -> None:
    """Write ``data`` in views of at most SLICE bytes: what one socket write leaves unsent,
    Python 3.11's transport copies and then trims send by send (see s3kv/wire/body.py)."""
    view = memoryview(data)
    for i in range(0, len(view), SLICE):
        await resp.write(view[i:i + SLICE])
