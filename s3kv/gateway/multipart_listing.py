"""ListParts and ListMultipartUploads: the uploads in progress that multipart.py keeps.

ListParts pages through an upload's parts in part-number order (``max-parts``,
``part-number-marker``). ListMultipartUploads lists a bucket's uploads in key order, the uploads
of one key oldest first (``prefix``, ``delimiter``, ``key-marker``, ``upload-id-marker``,
``max-uploads``, ``encoding-type=url``), as S3 does. Uploads live in the gateway's memory until
they complete, are aborted or expire (``UPLOAD_TTL``): another replica's uploads are not
listed, and a restart forgets them all.
"""

from __future__ import annotations

from aiohttp import web

from s3kv.gateway.requests import Target, encoding_type, max_keys, part_number_marker
from s3kv.gateway.s3_listing import common_prefix
from s3kv.gateway.s3xml import (
    XML,
    PartEntry,
    PartsPage,
    UploadEntry,
    UploadsPage,
    list_multipart_uploads,
    list_parts,
)
from s3kv.gateway.state import GatewayState
from s3kv.gateway.uploads import Upload, uploads_of


def key_text(key: bytes) -> str:
    """An upload's store key as the S3 key it was created under (requests.validate_key)."""
    return key.decode("utf-8", errors="surrogatepass")


async def list_parts_handler(request: web.Request, st: GatewayState,
                             t: Target) -> web.StreamResponse:
    ups = uploads_of(request)
    ups.expire(st)
    up = ups.get(t.query["uploadId"], t)
    limit = max_keys(t.query, "max-parts")
    marker = part_number_marker(t.query)
    numbers = sorted(n for n in up.parts if n > marker)
    shown = numbers[:limit]
    entries = []
    for n in shown:
        part = up.parts[n]
        checksum = (up.algorithm, part.checksum) if up.algorithm and part.checksum else None
        entries.append(PartEntry(n, part.at, part.etag, len(part.data), checksum))
    page = PartsPage(t.bucket, t.key, t.query["uploadId"], marker, limit, entries,
                     len(numbers) > len(shown),
                     (up.algorithm, up.checksum_type) if up.algorithm else None)
    return web.Response(body=list_parts(page), content_type=XML)


def _order(item: tuple[str, Upload]) -> tuple[bytes, float, str]:
    upload_id, up = item
    return up.key, up.initiated, upload_id


async def list_uploads_handler(request: web.Request, st: GatewayState,
                               t: Target) -> web.StreamResponse:
    st.store.ns_id(t.bucket)
    q = t.query
    encoding = encoding_type(q)
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter") or None
    key_marker, id_marker = q.get("key-marker", ""), q.get("upload-id-marker", "")
    limit = max_keys(q, "max-uploads")
    ups = uploads_of(request)
    ups.expire(st)
    pbytes, kbytes = prefix.encode(), key_marker.encode()
    mine = sorted(((uid, up) for uid, up in ups.active.items()
                   if up.bucket == t.bucket and up.key.startswith(pbytes)), key=_order)
    after_id = None  # the upload-id-marker's place among its key's uploads
    if id_marker and key_marker:
        after_id = next((i for i, (uid, up) in enumerate(mine)
                         if uid == id_marker and up.key == kbytes), None)
    uploads: list[UploadEntry] = []
    prefixes: list[str] = []
    last: tuple[str, str] | None = None
    truncated = False
    for i, (uid, up) in enumerate(mine):
        if up.key < kbytes or (up.key == kbytes and (after_id is None or i <= after_id)):
            continue  # at or before the markers
        key = key_text(up.key)
        common = common_prefix(key, len(prefix), delimiter or "")
        if common is not None and (common == key_marker or (prefixes and prefixes[-1] == common)):
            continue  # under a common prefix already returned
        if len(uploads) + len(prefixes) >= limit:
            truncated = True
            break
        if common is not None:
            prefixes.append(common)
            last = (common, "")
        else:
            uploads.append(UploadEntry(key, uid, up.initiated))
            last = (key, uid)
    page = UploadsPage(t.bucket, key_marker, id_marker, prefix, delimiter, limit, uploads,
                       prefixes, truncated, last if truncated else None, encoding)
    return web.Response(body=list_multipart_uploads(page), content_type=XML)
