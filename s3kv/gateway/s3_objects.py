"""S3 object operations: PutObject, GetObject (ranges, partNumber), HeadObject, DeleteObject
(with S3's conditional-delete demands), and the multipart calls, CopyObject, GetObjectAttributes,
GetObjectTagging and GetObjectAcl (delegated to multipart.py, copy.py, s3_attributes.py and
s3_configs.py). Object attributes (ETag, content headers, user metadata, checksum) come from
objattrs.py, preconditions from conditions.py."""

from __future__ import annotations

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway import copy, multipart, multipart_listing, objattrs, s3_attributes, s3_configs
from s3kv.gateway.bodies import Destination, read_body
from s3kv.gateway.chunked import BodySender
from s3kv.gateway.conditions import (
    NOT_MODIFIED,
    Demands,
    check_read,
    check_write,
    header_demands,
    is_conditional_write,
)
from s3kv.gateway.objattrs import Checksum, ObjectAttrs, attrs_of, object_etag
from s3kv.gateway.payload import BodyResult
from s3kv.gateway.reqkeys import OP
from s3kv.gateway.requests import Target, codec_of, durability, parse_range, validate_key
from s3kv.gateway.state import GatewayState
from s3kv.gateway.translate import unread
from s3kv.store import layout
from s3kv.store.landing import Landing
from s3kv.wire.body import pieces_of, views_of
from s3kv.wire.headers import index_headers, is_decimal


async def dispatch(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    m = request.method
    q = t.query
    if m == "POST" and "uploads" in q:
        request[OP] = "CreateMultipartUpload"
        return await multipart.create(request, st, t)
    if "uploadId" in q:
        st.store.ns_id(t.bucket)  # an upload's bucket first: NoSuchBucket, as on S3
    if "uploadId" in q and m == "GET":
        request[OP] = "ListParts"
        return await multipart_listing.list_parts_handler(request, st, t)
    if "uploadId" in q:
        return await multipart.dispatch(request, st, t)
    if m == "PUT" and copy.SOURCE_HEADER in request.headers:
        request[OP] = "CopyObject"
        return await copy.copy_object(request, st, t)
    if m == "PUT":
        request[OP] = "PutObject"
        return await put_object(request, st, t)
    if m == "GET" and "attributes" in q:
        request[OP] = "GetObjectAttributes"
        return await s3_attributes.get_object_attributes(request, st, t)
    if m == "GET" and "tagging" in q:
        request[OP] = "GetObjectTagging"
        return await s3_configs.get_object_tagging(request, st, t)
    if m == "GET" and "acl" in q:
        request[OP] = "GetObjectAcl"
        return await s3_configs.get_object_acl(request, st, t)
    if m in ("GET", "HEAD"):
        request[OP] = "GetObject" if m == "GET" else "HeadObject"
        return await get_object(request, st, t, head=m == "HEAD")
    if m == "DELETE":
        request[OP] = "DeleteObject"
        return await delete_object(request, st, t)
    raise RequestError("MethodNotAllowed", f"{m} is not allowed on an object.", 405)


def current_etag(st: GatewayState, bucket: str, key: bytes) -> str | None:
    """The ETag of the object under ``key`` now; None if there is none."""
    meta = st.store.head(bucket, key)
    return None if meta is None else object_etag(meta)


def body_checksum(result: BodyResult) -> Checksum | None:
    """The verified flexible checksum the client sent with a body (at most one)."""
    for algo, value in result.checksums.items():
        return Checksum(algo, value)
    return None


async def put_object(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    key = validate_key(t.key)
    st.store.ns_id(t.bucket)  # NoSuchBucket before reading a byte
    durable = durability(request)
    heads = index_headers(request.headers)  # read by the codec, the attributes and the body
    codec = codec_of(heads, st.store.namespace_codecs[t.bucket])
    attrs = objattrs.from_request(heads)
    conditional = is_conditional_write(request.headers)
    if conditional:  # fail before reading the body; checked again under the key's lock
        check_write(request.headers, current_etag(st, t.bucket, key))
    landing: Landing | None = None

    async def land(length: int) -> Destination | None:
        """Room for the body in its segment, to receive it straight into (store/landing.py)."""
        nonlocal landing
        landing = await st.store.land(t.bucket, [(key, length)], codec=codec,
                                      attrs=layout.MAX_ATTRS_BYTES)
        return None if landing is None else Destination([], landing.spans())

    try:
        body = await read_body(request, st, st.settings.max_block_size,
                               md5=st.settings.etag == "md5",
                               crc=codec is None or codec.name == "none", heads=heads, land=land)
        try:
            attrs = attrs.stamped(body.result.md5_hex or "", body_checksum(body.result))
            blob = attrs.encode()
            async with st.key_locks.hold(t.bucket, key):
                if conditional:
                    check_write(request.headers, current_etag(st, t.bucket, key))
                if landing is not None and body.landed and body.result.crc is not None:
                    [meta] = st.store.landed(landing, [body.result.crc], attrs=blob)
                else:
                    meta = await st.store.put(t.bucket, key, body.pieces, durable=durable,
                                              codec=codec, attrs=blob, crc=body.result.crc)
        finally:
            st.budget.release(body.reserved)
    finally:
        if landing is not None:  # given up, unless committed
            landing.abandon()
    if durable and landing is not None and body.landed:
        await landing.rooms[0].segment.on_backend()  # sealed, as put(durable) waits
    headers = {"ETag": object_etag(meta, attrs)}
    if attrs.checksum is not None:  # the client's (body_checksum): a full-object one
        headers.update(attrs.checksum.headers())
    return web.Response(headers=headers)


async def delete_object(request: web.Request, st: GatewayState,
                        t: Target) -> web.StreamResponse:
    st.store.ns_id(t.bucket)
    key = validate_key(t.key)
    demands = header_demands(request.headers, "x-amz-if-match-last-modified-time")
    async with st.key_locks.hold(t.bucket, key):
        if is_conditional_write(request.headers):
            check_write(request.headers, current_etag(st, t.bucket, key))
        check_demands(st, t.bucket, key, demands)
        await st.store.delete(t.bucket, key)
    return web.Response(status=204)


def check_demands(st: GatewayState, bucket: str, key: bytes, demands: Demands) -> None:
    """A conditional delete's demands of the object under ``key`` now (under its lock)."""
    if demands.asked():
        meta = st.store.head(bucket, key)
        if meta is None:
            demands.check(False)
        else:
            demands.check(True, object_etag(meta), meta.written_at, meta.size)


def _part_number(t: Target) -> int | None:
    raw = t.query.get("partNumber")
    if raw is None:
        return None
    if not is_decimal(raw) or not 1 <= int(raw) <= 10000:
        raise RequestError("InvalidArgument", "Part number must be an integer between 1 and "
                           "10000, inclusive.")
    return int(raw)


def _part_range(number: int, attrs: ObjectAttrs, size: int) -> tuple[int, int] | None:
    """Bytes [start, end) of part ``number``; None: the whole object (partNumber=1 of an
    object not uploaded in parts, as S3 answers)."""
    count = len(attrs.parts) or 1
    if number > count:
        raise RequestError("InvalidPartNumber", "The requested partnumber is not satisfiable",
                           416, {"Content-Range": f"bytes */{size}"})
    if not attrs.parts:
        return None
    start = sum(attrs.parts[:number - 1])
    return start, start + attrs.parts[number - 1]


async def get_object(request: web.Request, st: GatewayState, t: Target, *,
                     head: bool) -> web.StreamResponse:
    key = validate_key(t.key)
    meta = st.store.head(t.bucket, key)
    if meta is None:
        raise RequestError("NoSuchKey", "The specified key does not exist.", 404)
    attrs = attrs_of(meta)
    part = _part_number(t)
    range_header = request.headers.get("Range")
    if part is not None and range_header is not None:
        raise RequestError("InvalidRequest", "Cannot specify both Range header and partNumber "
                           "query parameter.")
    etag = object_etag(meta, attrs)
    if check_read(request.headers, etag, meta.written_at) == NOT_MODIFIED:
        kept = ("ETag", "Last-Modified", "Cache-Control", "Expires")
        full = objattrs.response_headers(meta, attrs, {}, checksum=False)
        return web.Response(status=304, headers={h: full[h] for h in kept if h in full})
    rng = (parse_range(range_header, meta.size) if part is None
           else _part_range(part, attrs, meta.size))
    mode = request.headers.get("x-amz-checksum-mode", "").strip().upper() == "ENABLED"
    headers = objattrs.response_headers(meta, attrs, t.query, checksum=mode and rng is None)
    if part is not None and attrs.parts:
        headers["x-amz-mp-parts-count"] = str(len(attrs.parts))
    status = 200
    start, end = 0, meta.size
    if rng is not None:
        start, end = rng
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{meta.size}"
    if head:
        headers["Content-Length"] = str(end - start)
        return web.Response(status=status, headers=headers)
    # no await since the head: the read is of the version whose headers these are
    data = await st.store.read(t.bucket, key, span=0 if rng is None else end - start)
    if data is None:  # evicted or corrupt (404), or the backend failing (503) since the head
        raise unread(st.store.head(t.bucket, key) is not None)
    views = views_of(data, start, end)
    st.metrics.bytes_out.inc(end - start)
    resp = web.StreamResponse(status=status, headers=headers)
    _keep_content_type(resp, headers)
    resp.content_length = end - start
    await resp.prepare(request)
    sender = BodySender(request, resp)  # the body's own buffers to the socket, in slices
    await sender.start()
    await sender.write(b"", pieces_of(views))
    await resp.write_eof()
    return resp


def _keep_content_type(resp: web.StreamResponse, headers: dict[str, str]) -> None:
    """aiohttp sets Content-Type from its own default for a body; the object's stands."""
    if "Content-Type" in headers:
        resp.headers["Content-Type"] = headers["Content-Type"]
