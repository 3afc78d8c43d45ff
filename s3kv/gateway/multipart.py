"""Multipart uploads at the gateway: parts are staged in memory (within the memory budget)
and become one block at CompleteMultipartUpload. A block is at most ``max_block_size``, so an
upload is bounded; idle uploads are dropped after ``UPLOAD_TTL`` seconds."""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass, field

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway.bodies import read_body, read_small
from s3kv.gateway.requests import Target, durability, validate_key
from s3kv.gateway.s3xml import (
    complete_multipart_upload,
    initiate_multipart_upload,
    parse_complete_multipart_upload,
)
from s3kv.gateway.state import GatewayState
from s3kv.store.codecs import CodecSpec, codec_from_headers

XML = "application/xml"
MIN_PART = 5 * 1024 * 1024
UPLOAD_TTL = 3600.0


@dataclass
class Upload:
    bucket: str
    key: bytes
    codec: CodecSpec | None = None  # declared at CreateMultipartUpload
    created: float = field(default_factory=time.monotonic)
    parts: dict[int, tuple[bytes, str, int]] = field(default_factory=dict)  # data, etag, budget

    @property
    def size(self) -> int:
        return sum(len(p[0]) for p in self.parts.values())


class Uploads:
    def __init__(self) -> None:
        self.active: dict[str, Upload] = {}

    def get(self, upload_id: str, t: Target) -> Upload:
        up = self.active.get(upload_id)
        if up is None or up.bucket != t.bucket or up.key != validate_key(t.key):
            raise RequestError("NoSuchUpload", "The specified multipart upload does not exist.",
                               404)
        return up

    def drop(self, upload_id: str, st: GatewayState) -> None:
        up = self.active.pop(upload_id, None)
        if up is not None:
            for _, _, reserved in up.parts.values():
                st.budget.release(reserved)

    def expire(self, st: GatewayState) -> None:
        now = time.monotonic()
        for uid in [u for u, up in self.active.items() if now - up.created > UPLOAD_TTL]:
            self.drop(uid, st)


UPLOADS: web.AppKey[Uploads] = web.AppKey("s3kv_uploads", Uploads)


def uploads_of(request: web.Request) -> Uploads:
    if UPLOADS not in request.app:
        raise RuntimeError("multipart uploads not configured")
    return request.app[UPLOADS]


async def create(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    key = validate_key(t.key)
    st.store.ns_id(t.bucket)
    ups = uploads_of(request)
    ups.expire(st)
    upload_id = uuid.uuid4().hex
    codec = codec_from_headers(request.headers, st.store.namespace_codecs[t.bucket])
    ups.active[upload_id] = Upload(t.bucket, key, codec)
    return web.Response(body=initiate_multipart_upload(t.bucket, t.key, upload_id),
                        content_type=XML)


async def dispatch(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    upload_id = t.query["uploadId"]
    ups = uploads_of(request)
    m = request.method
    if m == "PUT" and "partNumber" in t.query:
        request["op"] = "UploadPart"
        return await upload_part(request, st, t, ups.get(upload_id, t))
    if m == "POST":
        request["op"] = "CompleteMultipartUpload"
        return await complete(request, st, t, upload_id, ups)
    if m == "DELETE":
        request["op"] = "AbortMultipartUpload"
        ups.get(upload_id, t)
        ups.drop(upload_id, st)
        return web.Response(status=204)
    request["op"] = "Unsupported"
    raise RequestError("NotImplemented", "s3kv does not implement ListParts.", 501)


async def upload_part(request: web.Request, st: GatewayState, t: Target,
                      up: Upload) -> web.StreamResponse:
    try:
        number = int(t.query["partNumber"])
    except ValueError:
        number = 0
    if not 1 <= number <= 10000:
        raise RequestError("InvalidArgument", "Part number must be an integer between 1 and "
                           "10000, inclusive.")
    room = st.settings.max_block_size - up.size + len(up.parts.get(number, (b"",))[0])
    if room <= 0:
        raise RequestError("EntityTooLarge", "The upload exceeds the gateway's max block size.")
    body = await read_body(request, st, room, md5=True)
    etag = f'"{body.result.md5_hex}"'
    old = up.parts.pop(number, None)
    if old is not None:
        st.budget.release(old[2])
    up.parts[number] = (bytes(body.data), etag, body.reserved)
    return web.Response(headers={"ETag": etag})


async def complete(request: web.Request, st: GatewayState, t: Target, upload_id: str,
                   ups: Uploads) -> web.StreamResponse:
    up = ups.get(upload_id, t)
    listed = parse_complete_multipart_upload(await read_small(request, st))
    if not listed:
        raise RequestError("MalformedXML", "You must specify at least one part.")
    chosen: list[bytes] = []
    md5s = hashlib.md5()
    for i, part in enumerate(listed):
        have = up.parts.get(part.part_number)
        if have is None or have[1].strip('"') != part.etag.strip('"'):
            raise RequestError("InvalidPart", f"Part {part.part_number} was not uploaded or its "
                               "ETag does not match.")
        if i < len(listed) - 1 and len(have[0]) < MIN_PART:
            raise RequestError("EntityTooSmall", f"Part {part.part_number} is smaller than the "
                               "minimum allowed size (5 MiB) and is not the last part.")
        chosen.append(have[0])
        md5s.update(bytes.fromhex(have[1].strip('"')))
    data = b"".join(chosen)
    if len(data) > st.settings.max_block_size:
        raise RequestError("EntityTooLarge", "The upload exceeds the gateway's max block size.")
    durable = durability(request)
    await st.store.put(t.bucket, up.key, data, durable=durable, codec=up.codec)
    ups.drop(upload_id, st)
    etag = f'"{md5s.hexdigest()}-{len(listed)}"'
    return web.Response(body=complete_multipart_upload(f"/{t.bucket}/{t.key}", t.bucket, t.key,
                                                       etag), content_type=XML)
