"""S3 XML documents: the responses, rendered (s3xml_parse.py parses the few request bodies).

Rendering builds strings directly (escaped; characters XML 1.0 cannot carry are written as
numeric references, as S3 does; clients that need exact keys ask for ``EncodingType=url``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import quote

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
#: the Content-Type of every document here
XML = "application/xml"
HEADER = '<?xml version="1.0" encoding="UTF-8"?>\n'
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;", "\r": "&#13;"}
_ESCAPE_RE = re.compile("[&<>\"'\r\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def escape(text: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(), f"&#x{ord(m.group()):x};"), text)


def _el(name: str, value: object) -> str:
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f"<{name}>{escape(str(value))}</{name}>"


def _doc(root: str, body: str) -> bytes:
    return f'{HEADER}<{root} xmlns="{NS}">{body}</{root}>'.encode()


def iso8601(ts: float | datetime) -> str:
    """S3's timestamp form: 2009-10-12T17:50:30.000Z."""
    dt = ts if isinstance(ts, datetime) else datetime.fromtimestamp(ts, UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


# -- responses -------------------------------------------------------------------------------------

#: characters XML 1.0 cannot carry at all, not even as character references, surrogates
#: included: a request's byte that was no UTF-8 (0xFF, kept as "\udcff") is that byte again
_XML10_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_BYTES = range(0xDC80, 0xDD00)


def _printable(text: str) -> str:
    """Characters XML 1.0 cannot carry written as ``\\xNN``. Listings keep S3's ``&#xN;``
    references (clients that need exact keys ask for ``EncodingType=url``), but an error
    document must parse in every client: botocore's expat refuses ``&#x1;``, and a key with a
    control character would turn a clear 400 into an unparseable one (a surrogate: a 500)."""
    return _XML10_ILLEGAL.sub(
        lambda m: f"\\x{n & 0xFF if (n := ord(m.group())) in _BYTES else n:02x}", text)


def error_document(code: str, message: str, resource: str = "", request_id: str = "",
                   **extra: str) -> bytes:
    body = _el("Code", code) + _el("Message", _printable(message))
    body += "".join(_el(k, _printable(v)) for k, v in extra.items())
    body += _el("Resource", _printable(resource)) + _el("RequestId", request_id)
    return f"{HEADER}<Error>{body}</Error>".encode()


@dataclass(frozen=True)
class BucketEntry:
    name: str
    created: float | datetime


#: the one owner every bucket and object has (access is per credential, not per owner)
OWNER_ID = "s3kv"
OWNER_NAME = "s3kv"


def _owner(tag: str = "Owner") -> str:
    """The one owner (``tag``: Owner, or Initiator for an upload)."""
    return f"<{tag}>{_el('ID', OWNER_ID)}{_el('DisplayName', OWNER_NAME)}</{tag}>"


def list_buckets(buckets: Iterable[BucketEntry], *, continuation_token: str | None = None,
                 prefix: str | None = None) -> bytes:
    items = "".join(f"<Bucket>{_el('Name', b.name)}{_el('CreationDate', iso8601(b.created))}"
                    "</Bucket>" for b in buckets)
    tail = _el("ContinuationToken", continuation_token) if continuation_token else ""
    tail += _el("Prefix", prefix) if prefix is not None else ""
    return _doc("ListAllMyBucketsResult", f"{_owner()}<Buckets>{items}</Buckets>{tail}")


@dataclass(frozen=True)
class ObjectEntry:
    key: str
    last_modified: float | datetime
    etag: str  # quoted, as in the ETag header
    size: int
    storage_class: str = "STANDARD"


@dataclass
class ListPage:
    """What both ListObjects versions answer with."""

    bucket: str
    prefix: str = ""
    delimiter: str | None = None
    max_keys: int = 1000
    contents: Sequence[ObjectEntry] = field(default_factory=list)
    common_prefixes: Sequence[str] = field(default_factory=list)
    is_truncated: bool = False
    encoding_type: str | None = None  # "url" or None


@dataclass
class ListV2Page(ListPage):
    continuation_token: str | None = None
    next_continuation_token: str | None = None
    start_after: str | None = None
    fetch_owner: bool = False


@dataclass
class ListV1Page(ListPage):
    marker: str = ""
    next_marker: str | None = None


@dataclass
class VersionsPage(ListPage):
    key_marker: str = ""
    version_id_marker: str = ""
    #: NextKeyMarker (the last key or common prefix), when the page is truncated
    next_key_marker: str | None = None


def _encoder(encoding_type: str | None) -> Callable[[str], str]:
    if encoding_type == "url":
        return lambda text: quote(text, safe="/")
    return lambda text: text


#: the one version every object has: versioning is never enabled (GetBucketVersioning)
NULL_VERSION = "null"
#: what a listing of versions says of every object: its one version, the latest
_NULL_LATEST = _el("VersionId", NULL_VERSION) + _el("IsLatest", True)


def _entries(contents: Iterable[ObjectEntry], prefixes: Iterable[str],
             enc: Callable[[str], str], owner: bool, tag: str = "Contents",
             version: str = "") -> list[str]:
    """Each object as a ``tag`` element (``version``: what follows its Key), then the common
    prefixes."""
    parts = [f"<{tag}>{_el('Key', enc(o.key))}{version}"
             f"{_el('LastModified', iso8601(o.last_modified))}{_el('ETag', o.etag)}"
             f"{_el('Size', o.size)}{_owner() if owner else ''}"
             f"{_el('StorageClass', o.storage_class)}</{tag}>" for o in contents]
    parts += [f"<CommonPrefixes>{_el('Prefix', enc(p))}</CommonPrefixes>" for p in prefixes]
    return parts


def list_objects_v2(page: ListV2Page) -> bytes:
    """ListBucketResult for ListObjectsV2; with ``encoding_type='url'`` keys, prefixes,
    delimiter and StartAfter are URL-encoded as S3 does."""
    enc = _encoder(page.encoding_type)
    parts = [_el("Name", page.bucket), _el("Prefix", enc(page.prefix))]
    if page.delimiter:
        parts.append(_el("Delimiter", enc(page.delimiter)))
    parts.append(_el("MaxKeys", page.max_keys))
    if page.encoding_type == "url":
        parts.append(_el("EncodingType", "url"))
    parts.append(_el("KeyCount", len(page.contents) + len(page.common_prefixes)))
    parts.append(_el("IsTruncated", page.is_truncated))
    if page.continuation_token is not None:
        parts.append(_el("ContinuationToken", page.continuation_token))
    if page.next_continuation_token is not None:
        parts.append(_el("NextContinuationToken", page.next_continuation_token))
    if page.start_after is not None:
        parts.append(_el("StartAfter", enc(page.start_after)))
    parts += _entries(page.contents, page.common_prefixes, enc, page.fetch_owner)
    return _doc("ListBucketResult", "".join(parts))


def list_objects_v1(page: ListV1Page) -> bytes:
    """ListBucketResult for ListObjects (v1): Marker, NextMarker (with a delimiter), an Owner
    in every entry, as S3 answers."""
    enc = _encoder(page.encoding_type)
    parts = [_el("Name", page.bucket), _el("Prefix", enc(page.prefix)),
             _el("Marker", enc(page.marker))]
    if page.next_marker is not None:
        parts.append(_el("NextMarker", enc(page.next_marker)))
    parts += _limits(page, enc)
    parts += _entries(page.contents, page.common_prefixes, enc, True)
    return _doc("ListBucketResult", "".join(parts))


def _limits(page: ListPage, enc: Callable[[str], str]) -> list[str]:
    """MaxKeys, Delimiter, EncodingType and IsTruncated, in the order ListObjects (v1) and
    ListObjectVersions give them."""
    parts = [_el("MaxKeys", page.max_keys)]
    if page.delimiter:
        parts.append(_el("Delimiter", enc(page.delimiter)))
    if page.encoding_type == "url":
        parts.append(_el("EncodingType", "url"))
    return [*parts, _el("IsTruncated", page.is_truncated)]


def list_object_versions(page: VersionsPage) -> bytes:
    """ListVersionsResult of a bucket whose versioning was never enabled: every object is one
    version, ``null``, the latest; there are no delete markers."""
    enc = _encoder(page.encoding_type)
    parts = [_el("Name", page.bucket), _el("Prefix", enc(page.prefix)),
             _el("KeyMarker", enc(page.key_marker)),
             _el("VersionIdMarker", page.version_id_marker)]
    if page.next_key_marker is not None:
        parts += [_el("NextKeyMarker", enc(page.next_key_marker)),
                  _el("NextVersionIdMarker", NULL_VERSION)]
    parts += _limits(page, enc)
    parts += _entries(page.contents, page.common_prefixes, enc, True, "Version", _NULL_LATEST)
    return _doc("ListVersionsResult", "".join(parts))


def initiate_multipart_upload(bucket: str, key: str, upload_id: str) -> bytes:
    return _doc("InitiateMultipartUploadResult",
                _el("Bucket", bucket) + _el("Key", key) + _el("UploadId", upload_id))


def complete_multipart_upload(location: str, bucket: str, key: str, etag: str,
                              checksum: tuple[str, str, str] | None = None) -> bytes:
    """``checksum``: (algorithm, base64 value, checksum type) of the object, if it has one."""
    return _doc("CompleteMultipartUploadResult", _el("Location", location) +
                _el("Bucket", bucket) + _el("Key", key) + _el("ETag", etag) +
                _checksum_elements(checksum))


@dataclass(frozen=True)
class PartEntry:
    number: int
    last_modified: float
    etag: str  # quoted
    size: int
    checksum: tuple[str, str] | None = None  # (algorithm, base64 value)


@dataclass
class PartsPage:
    bucket: str
    key: str
    upload_id: str
    marker: int
    max_parts: int
    parts: Sequence[PartEntry]
    truncated: bool
    checksum: tuple[str, str] | None = None  # the upload's (algorithm, checksum type)


def list_parts(page: PartsPage) -> bytes:
    """ListPartsResult."""
    out = [_el("Bucket", page.bucket), _el("Key", page.key), _el("UploadId", page.upload_id),
           _el("PartNumberMarker", page.marker)]
    if page.parts:
        out.append(_el("NextPartNumberMarker", page.parts[-1].number))
    out += [_el("MaxParts", page.max_parts), _el("IsTruncated", page.truncated)]
    for p in page.parts:
        extra = _el(f"Checksum{p.checksum[0].upper()}", p.checksum[1]) if p.checksum else ""
        out.append(f"<Part>{_el('PartNumber', p.number)}"
                   f"{_el('LastModified', iso8601(p.last_modified))}{_el('ETag', p.etag)}"
                   f"{_el('Size', p.size)}{extra}</Part>")
    out += [_owner("Initiator"), _owner(), _el("StorageClass", "STANDARD")]
    if page.checksum:
        out += [_el("ChecksumAlgorithm", page.checksum[0].upper()),
                _el("ChecksumType", page.checksum[1])]
    return _doc("ListPartsResult", "".join(out))


@dataclass(frozen=True)
class UploadEntry:
    key: str
    upload_id: str
    initiated: float


@dataclass
class UploadsPage:
    bucket: str
    key_marker: str
    upload_id_marker: str
    prefix: str
    delimiter: str | None
    max_uploads: int
    uploads: Sequence[UploadEntry]
    prefixes: Sequence[str]
    truncated: bool
    next_markers: tuple[str, str] | None  # (NextKeyMarker, NextUploadIdMarker)
    encoding_type: str | None = None


def list_multipart_uploads(page: UploadsPage) -> bytes:
    """ListMultipartUploadsResult; keys, prefixes, markers and the delimiter URL-encoded with
    ``encoding_type='url'``."""
    enc = _encoder(page.encoding_type)
    out = [_el("Bucket", page.bucket), _el("KeyMarker", enc(page.key_marker)),
           _el("UploadIdMarker", page.upload_id_marker)]
    if page.next_markers:
        out += [_el("NextKeyMarker", enc(page.next_markers[0])),
                _el("NextUploadIdMarker", page.next_markers[1])]
    out.append(_el("Prefix", enc(page.prefix)))
    if page.delimiter:
        out.append(_el("Delimiter", enc(page.delimiter)))
    out += [_el("MaxUploads", page.max_uploads), _el("IsTruncated", page.truncated)]
    if page.encoding_type:
        out.append(_el("EncodingType", page.encoding_type))
    for u in page.uploads:
        out.append(f"<Upload>{_el('Key', enc(u.key))}{_el('UploadId', u.upload_id)}"
                   f"{_owner('Initiator')}{_owner()}"
                   f"{_el('StorageClass', 'STANDARD')}"
                   f"{_el('Initiated', iso8601(u.initiated))}</Upload>")
    out += [f"<CommonPrefixes>{_el('Prefix', enc(p))}</CommonPrefixes>" for p in page.prefixes]
    return _doc("ListMultipartUploadsResult", "".join(out))


def _checksum_elements(checksum: tuple[str, str, str] | None) -> str:
    """(algorithm, base64 value, checksum type) as a result's Checksum* elements."""
    if checksum is None:
        return ""
    algo, value, kind = checksum
    return _el(f"Checksum{algo.upper()}", value) + _el("ChecksumType", kind)


def copy_result(root: str, etag: str, last_modified: float,
                checksum: tuple[str, str, str] | None = None) -> bytes:
    """CopyObjectResult or CopyPartResult (``root``)."""
    return _doc(root, _el("LastModified", iso8601(last_modified)) + _el("ETag", etag) +
                _checksum_elements(checksum))


@dataclass(frozen=True)
class AttributesAnswer:
    """GetObjectAttributes' answer: each field None when not asked for (or, for ``parts``,
    when the object is not multipart); ``parts``: (total, marker, next marker, max, truncated)."""
    etag: str | None = None  # unquoted
    checksum: tuple[str, str, str] | None = None
    parts: tuple[int, int, int, int, bool] | None = None
    storage_class: str | None = None
    size: int | None = None


def object_attributes(a: AttributesAnswer) -> bytes:
    """GetObjectAttributesResponse, in S3's element order."""
    parts = "" if a.parts is None else "<ObjectParts>" + "".join(_el(n, v) for n, v in zip(
        ("PartsCount", "PartNumberMarker", "NextPartNumberMarker", "MaxParts", "IsTruncated"),
        a.parts, strict=True)) + "</ObjectParts>"
    return _doc("GetObjectAttributesResponse", "".join((
        "" if a.etag is None else _el("ETag", a.etag),
        "" if a.checksum is None else f"<Checksum>{_checksum_elements(a.checksum)}</Checksum>",
        parts, "" if a.storage_class is None else _el("StorageClass", a.storage_class),
        "" if a.size is None else _el("ObjectSize", a.size))))


def configuration(root: str, **elements: str) -> bytes:
    """A bucket configuration document as S3 reads one back: ``root`` with the elements given
    (GetBucketVersioning's ``VersioningConfiguration`` without a Status, and the like)."""
    return _doc(root, "".join(_el(n, v) for n, v in elements.items()))


def location_constraint(region: str | None) -> bytes:
    """GetBucketLocation: empty for us-east-1, as S3 answers."""
    value = "" if region in (None, "", "us-east-1") else escape(region or "")
    return f'{HEADER}<LocationConstraint xmlns="{NS}">{value}</LocationConstraint>'.encode()


@dataclass(frozen=True)
class ObjectVersion:
    """An object a request names, and the version it names (None: none)."""

    key: str
    version_id: str | None = None

    def elements(self) -> str:
        version = "" if self.version_id is None else _el("VersionId", self.version_id)
        return _el("Key", self.key) + version


@dataclass(frozen=True)
class DeleteError:
    target: ObjectVersion
    code: str
    message: str


def delete_result(deleted: Iterable[ObjectVersion], errors: Iterable[DeleteError] = (),
                  quiet: bool = False) -> bytes:
    """DeleteResult; in quiet mode only the errors are listed. Each entry names the version
    its request named."""
    parts = [] if quiet else [f"<Deleted>{d.elements()}</Deleted>" for d in deleted]
    parts += [f"<Error>{e.target.elements()}{_el('Code', e.code)}"
              f"{_el('Message', e.message)}</Error>" for e in errors]
    return _doc("DeleteResult", "".join(parts))
