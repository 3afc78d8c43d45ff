"""GetObjectAttributes: what HeadObject and ListParts would tell of a stored object, in one XML
answer, for the attributes the ``x-amz-object-attributes`` header names.

``ETag`` (unquoted, as S3 gives it here), ``Checksum`` (the flexible checksum the object was
written with, if any: a multipart object's composite without its ``-N``), ``ObjectParts``
(multipart objects only: the part count, paged by ``x-amz-max-parts``, 0 to 1000 as ListParts'
``max-parts``, and ``x-amz-part-number-marker``; no ``Part`` elements, which S3 gives only
with per-part checksums, and the gateway keeps part sizes, not part checksums),
``StorageClass`` (always STANDARD) and ``ObjectSize``. Nothing is read from the backend: the
index holds all of it.
"""

from __future__ import annotations

from aiohttp import web

from s3kv.errors import RequestError
from s3kv.gateway.objattrs import attrs_of, http_date, object_etag
from s3kv.gateway.requests import Target, max_keys, part_number_marker, validate_key
from s3kv.gateway.s3xml import XML, AttributesAnswer, object_attributes
from s3kv.gateway.state import GatewayState

#: the attribute names S3 accepts in ``x-amz-object-attributes``
NAMES = frozenset({"ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"})
HEADER = "x-amz-object-attributes"


def wanted(request: web.Request) -> set[str]:
    """The attribute names asked for; 400 InvalidArgument if none or an unknown one."""
    names = {n.strip() for v in request.headers.getall(HEADER, []) for n in v.split(",")}
    names.discard("")
    if not names:
        raise RequestError("InvalidArgument", f"GetObjectAttributes needs the {HEADER} header: "
                           f"one or more of {', '.join(sorted(NAMES))}, comma-separated.")
    unknown = names - NAMES
    if unknown:
        raise RequestError("InvalidArgument", f"Invalid attribute name specified: "
                           f"{', '.join(sorted(unknown))} (valid: {', '.join(sorted(NAMES))}).")
    return names


async def get_object_attributes(request: web.Request, st: GatewayState,
                                t: Target) -> web.StreamResponse:
    names = wanted(request)
    most = max_keys(request.headers, "x-amz-max-parts")
    marker = part_number_marker(request.headers, "x-amz-part-number-marker")
    meta = st.store.head(t.bucket, validate_key(t.key))
    if meta is None:
        raise RequestError("NoSuchKey", "The specified key does not exist.", 404)
    attrs = attrs_of(meta)
    checksum = None
    if "Checksum" in names and attrs.checksum is not None:
        c = attrs.checksum
        checksum = (c.algorithm, c.value.partition("-")[0], c.type)
    parts = None
    if "ObjectParts" in names and attrs.parts:
        total = len(attrs.parts)
        shown = max(0, min(total, marker + most) - marker)
        parts = (total, marker, marker + shown, most, marker + shown < total)
    answer = AttributesAnswer(
        etag=object_etag(meta, attrs).strip('"') if "ETag" in names else None,
        checksum=checksum, parts=parts,
        storage_class="STANDARD" if "StorageClass" in names else None,
        size=meta.size if "ObjectSize" in names else None)
    return web.Response(body=object_attributes(answer), content_type=XML,
                        headers={"Last-Modified": http_date(int(meta.written_at))})
