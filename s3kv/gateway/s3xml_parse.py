"""S3 XML request bodies (CompleteMultipartUpload, DeleteObjects, CreateBucketConfiguration),
parsed safely: bytes of at most ``MAX_XML_BYTES``, no DTD or entity declaration, namespaces
ignored (clients send the S3 namespace or none); anything else raises ``RequestError``
(MalformedXML, InvalidPartOrder, InvalidArgument). s3xml.py renders the responses.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from itertools import pairwise

from s3kv.errors import RequestError
from s3kv.gateway.conditions import Demands
from s3kv.gateway.s3xml import ObjectVersion
from s3kv.wire.headers import is_decimal

MAX_XML_BYTES = 2 * 1024 * 1024  # DeleteObjects with 1000 long keys stays well below this
MAX_DELETE_KEYS = 1000
MAX_PART_NUMBER = 10000


def _malformed(why: str = "") -> RequestError:
    msg = ("The XML you provided was not well-formed or did not validate against our published "
           "schema")
    return RequestError("MalformedXML", f"{msg} ({why})" if why else msg)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_xml(data: bytes, root: str) -> ET.Element:
    """Parse a request body whose root element must be ``root`` (any namespace)."""
    if len(data) > MAX_XML_BYTES:
        raise _malformed(f"the document is larger than {MAX_XML_BYTES} bytes")
    if b"\x00" in data:  # UTF-16/32 would slip past the byte checks below
        raise _malformed("the document must be UTF-8")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data or b"<!doctype" in data:
        raise _malformed("DTDs and entity declarations are not accepted")
    try:
        elem = ET.fromstring(data)
    except ET.ParseError as exc:
        raise _malformed(str(exc)) from None
    if _local(elem.tag) != root:
        raise _malformed(f"the root element must be {root}")
    return elem


def _children(elem: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in elem if _local(c.tag) == name]


def _text(elem: ET.Element, name: str, *, required: bool = True) -> str | None:
    found = _children(elem, name)
    if len(found) > 1:
        raise _malformed(f"{name} appears more than once")
    if not found:
        if required:
            raise _malformed(f"{name} is missing")
        return None
    return found[0].text or ""


@dataclass(frozen=True)
class CompletedPart:
    part_number: int
    etag: str  # as sent, normally quoted
    #: flexible checksums listed for the part: algorithm (lower case) -> base64 value
    checksums: dict[str, str] = field(default_factory=dict)


_PART_CHECKSUMS = ("crc32", "crc32c", "crc64nvme", "sha1", "sha256")


def parse_complete_multipart_upload(data: bytes) -> list[CompletedPart]:
    """Parts in ascending PartNumber order (else InvalidPartOrder); at least one part."""
    root = parse_xml(data, "CompleteMultipartUpload")
    parts: list[CompletedPart] = []
    for el in _children(root, "Part"):
        raw = (_text(el, "PartNumber") or "").strip()
        if not is_decimal(raw) or not 1 <= int(raw) <= MAX_PART_NUMBER:
            raise RequestError("InvalidArgument", "Part number must be an integer between 1 and "
                               f"{MAX_PART_NUMBER}, inclusive")
        etag = (_text(el, "ETag") or "").strip()
        if not etag:
            raise _malformed("a Part has an empty ETag")
        sums = {a: (_text(el, f"Checksum{a.upper()}", required=False) or "").strip()
                for a in _PART_CHECKSUMS}
        parts.append(CompletedPart(int(raw), etag, {a: v for a, v in sums.items() if v}))
    if not parts:
        raise _malformed("CompleteMultipartUpload lists no Part")
    for a, b in pairwise(parts):
        if b.part_number <= a.part_number:
            raise RequestError("InvalidPartOrder", "The list of parts was not in ascending "
                               "order. The parts list must be specified in order by part number.")
    return parts


@dataclass(frozen=True)
class DeleteRequest:
    objects: list[ObjectVersion]
    quiet: bool
    #: what the delete of ``objects[i]`` demands of it (its ETag, LastModifiedTime, Size)
    demands: list[Demands]


def _entry_demands(obj: ET.Element) -> Demands:
    """A DeleteObjects entry's conditions: ``ETag``, ``LastModifiedTime``, ``Size``
    (:meth:`Demands.read`); MalformedXML for one that cannot be read."""
    try:
        return Demands.read(_text(obj, "ETag", required=False),
                            _text(obj, "LastModifiedTime", required=False),
                            _text(obj, "Size", required=False), iso=True)
    except ValueError as exc:
        raise _malformed("LastModifiedTime is not a date" if str(exc) == "time"
                         else "Size is not a non-negative integer") from None


def parse_delete(data: bytes) -> DeleteRequest:
    """DeleteObjects body: 1 to 1000 Object entries (Key, optional VersionId, optional
    conditions), optional Quiet. A VersionId is kept as given (the caller decides what it may
    delete)."""
    root = parse_xml(data, "Delete")
    quiet_text = _text(root, "Quiet", required=False)
    quiet = (quiet_text or "").strip().lower() == "true"
    if quiet_text is not None and quiet_text.strip().lower() not in ("true", "false"):
        raise _malformed("Quiet must be true or false")
    objects, demands = [], []
    for obj in _children(root, "Object"):
        key = _text(obj, "Key")
        if not key:
            raise _malformed("an Object has an empty Key")
        objects.append(ObjectVersion(key, _text(obj, "VersionId", required=False)))
        demands.append(_entry_demands(obj))
    if not objects or len(objects) > MAX_DELETE_KEYS:
        raise _malformed(f"Delete must list between 1 and {MAX_DELETE_KEYS} objects")
    return DeleteRequest(objects, quiet, demands)


#: CreateBucketConfiguration elements asking for what the gateway does not do: 501, no bucket
_REFUSED_BUCKET_CONFIG = {"Tags": "bucket tags", "Location": "directory buckets",
                          "Bucket": "directory buckets"}


def parse_create_bucket_configuration(data: bytes) -> str | None:
    """The LocationConstraint of a CreateBucket body (None when the body is empty); 501
    NotImplemented for tags or a directory bucket's Location and Bucket, never dropped."""
    if not data.strip():
        return None
    root = parse_xml(data, "CreateBucketConfiguration")
    for child in root:
        why = _REFUSED_BUCKET_CONFIG.get(_local(child.tag))
        if why is not None:
            raise RequestError("NotImplemented", f"s3kv does not implement {why} "
                               f"(CreateBucketConfiguration's {_local(child.tag)}); no bucket "
                               "was created.", 501)
    value = _text(root, "LocationConstraint", required=False)
    return value.strip() if value and value.strip() else None
