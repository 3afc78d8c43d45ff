"""Multipart uploads at the gateway: parts are staged in memory (within the memory budget,
uploads.py keeps them) and become one block at CompleteMultipartUpload. A block is at most
``max_block_size``, so an upload is bounded. A part that arrives for an upload dropped
meanwhile (aborted, or idle: uploads.py) gets NoSuchUpload.

The object's ETag is ``md5(concatenated part MD5s)-N`` as S3's (``--etag fast``: of the parts'
fast ETags); its attributes (content headers and user metadata from CreateMultipartUpload, the
part sizes for GET ?partNumber, the flexible checksum) are stored with the block. A checksum
algorithm declared at Create (``x-amz-checksum-algorithm``) is echoed by every call; the
object's checksum is COMPOSITE (``base64(H(part digests))-N``) or FULL_OBJECT (CRCs only: the
checksum of the whole body) as ``x-amz-checksum-type`` asks. A Complete repeated after success
(a client retry) gets the first answer again, from a bounded memory of recent completions.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
import uuid

from aiohttp import web
from zlib_ng import zlib_ng

from s3kv.errors import RequestError
from s3kv.gateway import copy
from s3kv.gateway.bodies import read_body, read_small
from s3kv.gateway.body_headers import checksum_algorithm, int_header, refuse_unchecked
from s3kv.gateway.checksums import ALGORITHMS, digest_b64, new_checksum
from s3kv.gateway.conditions import check_write, header_demands, is_conditional_write
from s3kv.gateway.objattrs import Checksum, fast_etag, from_request, object_etag
from s3kv.gateway.reqkeys import OP
from s3kv.gateway.requests import Target, codec_of, durability, validate_key
from s3kv.gateway.s3xml import (
    XML,
    complete_multipart_upload,
    copy_result,
    initiate_multipart_upload,
)
from s3kv.gateway.s3xml_parse import parse_complete_multipart_upload
from s3kv.gateway.state import GatewayState
from s3kv.gateway.uploads import Completed, Part, Upload, Uploads, uploads_of
from s3kv.wire.headers import HeaderValues, index_headers, is_decimal

MIN_PART = 5 * 1024 * 1024
_CRCS = ("crc32", "crc32c", "crc64nvme")


def _checksum_declaration(request: web.Request) -> tuple[str | None, str]:
    algo = checksum_algorithm(request.headers.get("x-amz-checksum-algorithm"))
    kind = request.headers.get("x-amz-checksum-type", "").strip().upper()
    if algo is None:
        if kind:
            raise RequestError("InvalidRequest", "x-amz-checksum-type needs "
                               "x-amz-checksum-algorithm.")
        return None, "COMPOSITE"
    kind = kind or ("FULL_OBJECT" if algo == "crc64nvme" else "COMPOSITE")
    if kind not in ("COMPOSITE", "FULL_OBJECT") or (kind == "FULL_OBJECT" and algo not in _CRCS) \
            or (kind == "COMPOSITE" and algo == "crc64nvme"):
        raise RequestError("InvalidRequest", f"The {kind} checksum type cannot be used with the "
                           f"{algo.upper()} checksum algorithm.")
    return algo, kind


async def create(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    key = validate_key(t.key)
    st.store.ns_id(t.bucket)
    ups = uploads_of(request)
    ups.expire(st)
    upload_id = uuid.uuid4().hex
    heads = index_headers(request.headers)
    codec = codec_of(heads, st.store.namespace_codecs[t.bucket])
    algo, kind = _checksum_declaration(request)
    up = Upload(t.bucket, key, codec, from_request(heads), algo, kind)
    ups.active[upload_id] = up
    return web.Response(body=initiate_multipart_upload(t.bucket, t.key, upload_id),
                        content_type=XML, headers=up.checksum_headers())


async def dispatch(request: web.Request, st: GatewayState, t: Target) -> web.StreamResponse:
    upload_id = t.query["uploadId"]
    ups = uploads_of(request)
    m = request.method
    if m == "PUT" and "partNumber" in t.query:
        copying = copy.SOURCE_HEADER in request.headers
        request[OP] = "UploadPartCopy" if copying else "UploadPart"
        up = ups.get(upload_id, t)
        with up.working():
            return await (upload_part_copy if copying else upload_part)(request, st, t, up)
    if m == "POST":
        request[OP] = "CompleteMultipartUpload"
        active = ups.active.get(upload_id)
        if active is None:  # a retry of one that completed, or NoSuchUpload
            return await complete(request, st, t, upload_id, ups)
        with active.working():
            async with active.finishing:
                return await complete(request, st, t, upload_id, ups)
    if m == "DELETE":
        request[OP] = "AbortMultipartUpload"
        demands = header_demands(request.headers, "x-amz-if-match-initiated-time", sized=False)
        async with ups.get(upload_id, t).finishing:  # a Complete under way ends first
            up = ups.get(upload_id, t)  # NoSuchUpload if it completed the upload
            demands.check(True, time=up.initiated)
            ups.drop(upload_id, st)
        return web.Response(status=204)
    raise RuntimeError(f"{m} with an uploadId has no handler here (classify.py)")


def _part_number(t: Target) -> int:
    raw = t.query["partNumber"]
    if not is_decimal(raw) or not 1 <= int(raw) <= 10000:
        raise RequestError("InvalidArgument", "Part number must be an integer between 1 and "
                           "10000, inclusive.")
    return int(raw)


def _room(st: GatewayState, up: Upload, number: int) -> int:
    """Bytes part ``number`` may have within the upload's limit (max_block_size); 0 at the
    limit, where an empty part (S3 allows an empty last part) is still taken."""
    have = up.parts.get(number)
    room = st.settings.max_block_size - up.size + (len(have.data) if have else 0)
    if room < 0:
        raise RequestError("EntityTooLarge", "The upload exceeds the gateway's max block size.")
    return room


def _keep_part(st: GatewayState, up: Upload, number: int, part: Part) -> None:
    if up.dropped:  # aborted, or dropped idle, while this part arrived
        st.budget.release(part.reserved)
        raise RequestError("NoSuchUpload", "The specified multipart upload does not exist.",
                           404)
    old = up.parts.pop(number, None)
    if old is not None:
        st.budget.release(old.reserved)
    up.parts[number] = part


async def upload_part(request: web.Request, st: GatewayState, t: Target,
                      up: Upload) -> web.StreamResponse:
    number = _part_number(t)
    body = await read_body(request, st, _room(st, up, number), md5=st.settings.etag == "md5")
    try:
        data = bytes(body.data)
        sent = body.result.checksums
        if up.algorithm is not None and sent and up.algorithm not in sent:
            raise RequestError("InvalidRequest", f"The upload was created with the "
                               f"{up.algorithm.upper()} checksum algorithm; this part carries "
                               f"{sorted(sent)[0].upper()}.")
        checksum = None
        if up.algorithm is not None:
            checksum = sent.get(up.algorithm) or await asyncio.to_thread(digest_b64,
                                                                         up.algorithm, data)
        md5 = body.result.md5_hex
        etag = f'"{md5}"' if md5 else f'"{fast_etag(zlib_ng.crc32(data), len(data))}"'
    except BaseException:
        st.budget.release(body.reserved)
        raise
    _keep_part(st, up, number, Part(data, etag, body.reserved, checksum))
    return web.Response(headers={"ETag": etag, **_checksum_header(up, checksum)})


def _checksum_header(up: Upload, checksum: str | None) -> dict[str, str]:
    """A part's checksum in the upload's algorithm, as its answer's header (if it has one)."""
    if checksum is None or up.algorithm is None:
        return {}
    return {f"x-amz-checksum-{up.algorithm}": checksum}


def _part_digests(data: bytes, md5: bool, algorithm: str | None) -> tuple[str, str | None]:
    """A copied part's ETag (quoted) and checksum in the upload's algorithm (in a thread)."""
    etag = hashlib.md5(data).hexdigest() if md5 else fast_etag(zlib_ng.crc32(data), len(data))
    return f'"{etag}"', None if algorithm is None else digest_b64(algorithm, data)


async def upload_part_copy(request: web.Request, st: GatewayState, t: Target,
                           up: Upload) -> web.StreamResponse:
    """A part whose bytes are a range of an existing object (copy.py reads it)."""
    number = _part_number(t)
    room = _room(st, up, number)
    src, key = copy.resolve_source(request)
    source, reserved = await copy.read_reserved(request, st, src, key)
    try:
        start, end = copy.source_range(request, len(source.data))
        if end - start > room:
            raise RequestError("EntityTooLarge", "The upload exceeds the gateway's max block "
                               "size.")
        data = bytes(memoryview(source.data)[start:end])
        del source
        etag, checksum = await asyncio.to_thread(_part_digests, data,
                                                 st.settings.etag == "md5", up.algorithm)
    except BaseException:
        st.budget.release(reserved)
        raise
    # the part holds its own bytes from now on; the rest of the source's reservation goes back
    st.budget.release(reserved - len(data))
    _keep_part(st, up, number, Part(data, etag, len(data), checksum))
    return web.Response(body=copy_result("CopyPartResult", etag, time.time()),
                        content_type=XML, headers=_checksum_header(up, checksum))


def _object_checksum(up: Upload, chosen: list[Part], data: bytes) -> Checksum | None:
    """The object's checksum (run in a thread: FULL_OBJECT hashes the whole body)."""
    if up.algorithm is None:
        return None
    if up.checksum_type == "FULL_OBJECT":
        return Checksum(up.algorithm, digest_b64(up.algorithm, data), "FULL_OBJECT")
    h = new_checksum(up.algorithm)
    for part in chosen:
        assert part.checksum is not None
        h.update(base64.b64decode(part.checksum))
    value = base64.b64encode(h.digest()).decode()
    return Checksum(up.algorithm, f"{value}-{len(chosen)}", "COMPOSITE")


def _repeat(request: web.Request, t: Target, upload_id: str,
            ups: Uploads) -> web.StreamResponse | None:
    done = ups.completed.get(upload_id)
    if done is None or done.bucket != t.bucket or done.key != validate_key(t.key):
        return None
    return web.Response(body=done.body, content_type=XML, headers=done.headers)


def _check_object(heads: HeaderValues, up: Upload, size: int,
                  checksum: Checksum | None) -> None:
    """What a Complete says of the object: its size (``x-amz-mp-object-size``), its checksum
    type (``x-amz-checksum-type``) and its checksum in the upload's algorithm (400 BadDigest if
    another); each of the others that differs, and a checksum in another algorithm, is 400
    InvalidRequest, never skipped. The upload stays open."""
    expected = int_header(heads, "x-amz-mp-object-size")
    if expected is not None and expected != size:
        raise RequestError("InvalidRequest", f"x-amz-mp-object-size is {expected}, but the "
                           f"parts listed make {size} bytes.")
    kind = heads.get("x-amz-checksum-type", [""])[0].strip().upper()
    if kind and up.algorithm and kind != up.checksum_type:
        raise RequestError("InvalidRequest", f"x-amz-checksum-type is {kind}, but the upload "
                           f"was created with {up.checksum_type}.")
    other = [a for a in ALGORITHMS if a != up.algorithm and heads.get(f"x-amz-checksum-{a}")]
    if other:
        raise RequestError("InvalidRequest", f"x-amz-checksum-{other[0]} names an object "
                           f"checksum, but the upload was created with "
                           f"{up.algorithm.upper() if up.algorithm else 'no checksum algorithm'} "
                           "(CreateMultipartUpload's x-amz-checksum-algorithm).")
    sent = heads.get(f"x-amz-checksum-{up.algorithm}") if up.algorithm else None
    if sent and checksum is not None and sent[0].strip() != checksum.value \
            and sent[0].strip().split("-")[0] != checksum.value.split("-")[0]:
        raise RequestError("BadDigest", f"The {up.algorithm} you specified did not match the "
                           "calculated checksum.")


async def complete(request: web.Request, st: GatewayState, t: Target, upload_id: str,
                   ups: Uploads) -> web.StreamResponse:
    heads = index_headers(request.headers)
    refuse_unchecked(heads)
    if upload_id not in ups.active:
        again = _repeat(request, t, upload_id, ups)
        if again is not None:
            await read_small(request, st, object_checksum=True)  # as the first one was
            return again
    up = ups.get(upload_id, t)
    listed = parse_complete_multipart_upload(await read_small(request, st,
                                                              object_checksum=True))
    if not listed:
        raise RequestError("MalformedXML", "You must specify at least one part.")
    chosen: list[Part] = []
    etags = hashlib.md5()
    for i, part in enumerate(listed):
        have = up.parts.get(part.part_number)
        if have is None or have.etag.strip('"') != part.etag.strip('"'):
            raise RequestError("InvalidPart", f"Part {part.part_number} was not uploaded or its "
                               "ETag does not match.")
        if any(have.checksum != v for a, v in part.checksums.items() if a == up.algorithm):
            raise RequestError("InvalidPart", f"The {up.algorithm} checksum listed for part "
                               f"{part.part_number} is not the one it was uploaded with.")
        if i < len(listed) - 1 and len(have.data) < MIN_PART:
            raise RequestError("EntityTooSmall", f"Part {part.part_number} is smaller than the "
                               "minimum allowed size (5 MiB) and is not the last part.")
        chosen.append(have)
        tag = have.etag.strip('"')
        etags.update(bytes.fromhex(tag) if len(tag) == 32 else tag.encode())
    data = b"".join(p.data for p in chosen)
    if len(data) > st.settings.max_block_size:
        raise RequestError("EntityTooLarge", "The upload exceeds the gateway's max block size.")
    checksum = await asyncio.to_thread(_object_checksum, up, chosen, data)
    _check_object(heads, up, len(data), checksum)
    etag = f"{etags.hexdigest()}-{len(listed)}"
    attrs = up.attrs.stamped(etag, checksum, tuple(len(p.data) for p in chosen))
    durable = durability(request)
    async with st.key_locks.hold(t.bucket, up.key):
        if is_conditional_write(request.headers):
            check_write(request.headers, _current(st, t.bucket, up.key))
        meta = await st.store.put(t.bucket, up.key, data, durable=durable, codec=up.codec,
                                  attrs=attrs.encode())
    ups.drop(upload_id, st)
    body = complete_multipart_upload(f"/{t.bucket}/{t.key}", t.bucket, t.key,
                                     object_etag(meta, attrs), checksum)
    headers = checksum.headers() if checksum is not None else {}
    ups.remember(upload_id, Completed(t.bucket, up.key, body, headers))
    return web.Response(body=body, content_type=XML, headers=headers)


def _current(st: GatewayState, bucket: str, key: bytes) -> str | None:
    meta = st.store.head(bucket, key)
    return None if meta is None else object_etag(meta)
