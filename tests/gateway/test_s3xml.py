"""S3 XML: documents parse back as botocore reads them; hostile inputs are refused."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.model import ServiceModel
from botocore.parsers import RestXMLParser
from botocore.session import get_session

from s3kv.errors import RequestError
from s3kv.gateway import s3xml, s3xml_parse

T0 = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def _botocore_parse(operation: str, body: bytes, status: int = 200) -> dict[str, Any]:
    """Parse a response document with botocore's own S3 parser, as boto3 will."""
    loader = get_session().get_component("data_loader")
    model = ServiceModel(loader.load_service_model("s3", "service-2"), "s3")
    op = model.operation_model(operation)
    parsed: dict[str, Any] = RestXMLParser().parse(
        {"status_code": status, "headers": {}, "body": body}, op.output_shape)
    return parsed


def test_error_document() -> None:
    doc = s3xml.error_document("NoSuchKey", "The key <x> & 'y'", "/b/k", "req-1",
                               Key="k")
    root = ET.fromstring(doc)
    assert root.tag == "Error" and root.findtext("Code") == "NoSuchKey"
    assert root.findtext("Message") == "The key <x> & 'y'" and root.findtext("Key") == "k"
    parsed = _botocore_parse("GetObject", doc, 404)
    assert parsed["Error"]["Code"] == "NoSuchKey"


def test_list_buckets_and_location() -> None:
    doc = s3xml.list_buckets([s3xml.BucketEntry("a", T0), s3xml.BucketEntry("b", 0.0)])
    parsed = _botocore_parse("ListBuckets", doc)
    assert [b["Name"] for b in parsed["Buckets"]] == ["a", "b"]
    assert parsed["Buckets"][0]["CreationDate"] == T0
    root = ET.fromstring(s3xml.location_constraint("eu-west-1"))
    assert root.tag == f"{{{s3xml.NS}}}LocationConstraint" and root.text == "eu-west-1"
    assert ET.fromstring(s3xml.location_constraint("us-east-1")).text is None


def test_list_objects_v2_round_trip() -> None:
    page = s3xml.ListV2Page(
        bucket="bkt", prefix="p/", delimiter="/", max_keys=2, is_truncated=True,
        continuation_token="tok1", next_continuation_token="tok2", start_after="p/0",
        contents=[s3xml.ObjectEntry("p/a&b", T0, '"abc"', 10),
                  s3xml.ObjectEntry("p/<c>", 0.0, '"def"', 0)],
        common_prefixes=["p/d/"])
    parsed = _botocore_parse("ListObjectsV2", s3xml.list_objects_v2(page))
    assert [o["Key"] for o in parsed["Contents"]] == ["p/a&b", "p/<c>"]
    assert parsed["Contents"][0]["ETag"] == '"abc"' and parsed["Contents"][0]["Size"] == 10
    assert parsed["Contents"][0]["LastModified"] == T0
    assert parsed["CommonPrefixes"] == [{"Prefix": "p/d/"}]
    assert parsed["KeyCount"] == 3 and parsed["IsTruncated"] is True
    assert parsed["NextContinuationToken"] == "tok2" and parsed["StartAfter"] == "p/0"


def test_list_objects_v2_url_encoding() -> None:
    page = s3xml.ListV2Page(bucket="b", prefix="a b/", encoding_type="url",
                            contents=[s3xml.ObjectEntry("a b/\x01é", T0, '"e"', 1)])
    doc = s3xml.list_objects_v2(page)
    root = ET.fromstring(doc)
    ns = {"s": s3xml.NS}
    assert root.findtext("s:EncodingType", namespaces=ns) == "url"
    assert root.findtext("s:Contents/s:Key", namespaces=ns) == "a%20b/%01%C3%A9"
    plain = s3xml.list_objects_v2(s3xml.ListV2Page(
        bucket="b", contents=[s3xml.ObjectEntry("tab\there\rcr", T0, '"e"', 1)]))
    key = ET.fromstring(plain).findtext("s:Contents/s:Key", namespaces=ns)
    assert key == "tab\there\rcr"


def test_list_object_versions_round_trip() -> None:
    page = s3xml.VersionsPage(
        bucket="bkt", prefix="p/", delimiter="/", max_keys=2, is_truncated=True,
        key_marker="p/0", version_id_marker="null", next_key_marker="p/d/",
        contents=[s3xml.ObjectEntry("p/a&b", T0, '"abc"', 10)], common_prefixes=["p/d/"])
    parsed = _botocore_parse("ListObjectVersions", s3xml.list_object_versions(page))
    [version] = parsed["Versions"]
    assert (version["Key"], version["VersionId"], version["IsLatest"]) == ("p/a&b", "null", True)
    assert (version["ETag"], version["Size"], version["LastModified"]) == ('"abc"', 10, T0)
    assert version["Owner"]["ID"] and version["StorageClass"] == "STANDARD"
    assert parsed["CommonPrefixes"] == [{"Prefix": "p/d/"}] and "DeleteMarkers" not in parsed
    assert (parsed["KeyMarker"], parsed["VersionIdMarker"], parsed["NextKeyMarker"],
            parsed["NextVersionIdMarker"], parsed["IsTruncated"]) == \
        ("p/0", "null", "p/d/", "null", True)
    last = s3xml.list_object_versions(s3xml.VersionsPage(bucket="bkt", encoding_type="url",
                                                         contents=[s3xml.ObjectEntry(
                                                             "a b", T0, '"e"', 1)]))
    parsed = _botocore_parse("ListObjectVersions", last)
    assert "NextKeyMarker" not in parsed and parsed["Versions"][0]["Key"] == "a%20b"


def test_multipart_documents() -> None:
    init = _botocore_parse("CreateMultipartUpload",
                           s3xml.initiate_multipart_upload("b", "k/1", "up-1"))
    assert (init["Bucket"], init["Key"], init["UploadId"]) == ("b", "k/1", "up-1")
    done = _botocore_parse("CompleteMultipartUpload", s3xml.complete_multipart_upload(
        "http://h/b/k", "b", "k", '"abc-2"'))
    assert done["ETag"] == '"abc-2"' and done["Location"] == "http://h/b/k"


def test_parse_complete_multipart_upload() -> None:
    body = (b'<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b'<Part><ETag>"e1"</ETag><PartNumber>1</PartNumber></Part>'
            b'<Part><PartNumber>3</PartNumber><ETag>"e3"</ETag></Part>'
            b"</CompleteMultipartUpload>")
    parts = s3xml_parse.parse_complete_multipart_upload(body)
    assert [(p.part_number, p.etag) for p in parts] == [(1, '"e1"'), (3, '"e3"')]
    no_ns = body.replace(b' xmlns="http://s3.amazonaws.com/doc/2006-03-01/"', b"")
    assert len(s3xml_parse.parse_complete_multipart_upload(no_ns)) == 2
    cases = {
        body.replace(b"<PartNumber>3", b"<PartNumber>1"): "InvalidPartOrder",
        body.replace(b"<PartNumber>3", b"<PartNumber>0"): "InvalidArgument",
        body.replace(b"<PartNumber>3", b"<PartNumber>x"): "InvalidArgument",
        body.replace(b'<ETag>"e3"</ETag>', b""): "MalformedXML",
        b"<CompleteMultipartUpload/>": "MalformedXML",
        b"<Other/>": "MalformedXML",
        b"<CompleteMultipartUpload><Part>": "MalformedXML",
        b"": "MalformedXML",
    }
    for data, code in cases.items():
        with pytest.raises(RequestError) as info:
            s3xml_parse.parse_complete_multipart_upload(data)
        assert info.value.code == code, data


def _delete_body(keys: list[str], quiet: str | None = None) -> bytes:
    objs = "".join(f"<Object><Key>{s3xml.escape(k)}</Key></Object>" for k in keys)
    q = f"<Quiet>{quiet}</Quiet>" if quiet is not None else ""
    return f'<?xml version="1.0" encoding="UTF-8"?><Delete>{q}{objs}</Delete>'.encode()


def test_parse_delete_and_render_result() -> None:
    req = s3xml_parse.parse_delete(_delete_body(["a", "b&c", "é"], "true"))
    assert [o.key for o in req.objects] == ["a", "b&c", "é"] and req.quiet
    assert {o.version_id for o in req.objects} == {None}
    assert not s3xml_parse.parse_delete(_delete_body(["a"])).quiet
    for bad in (_delete_body([]), _delete_body([f"k{i}" for i in range(1001)]),
                _delete_body(["a"], "maybe"), b"<Delete><Object/></Delete>",
                b"<Delete><Object><Key>a</Key><VersionId>1</VersionId><VersionId>2</VersionId>"
                b"</Object></Delete>"):
        with pytest.raises(RequestError) as info:
            s3xml_parse.parse_delete(bad)
        assert info.value.code == "MalformedXML"
    assert len(s3xml_parse.parse_delete(
        _delete_body([f"k{i}" for i in range(1000)])).objects) == 1000
    versioned = s3xml_parse.parse_delete(
        b"<Delete><Object><Key>a</Key><VersionId>null</VersionId></Object>"
        b"<Object><Key>b</Key><VersionId>v1</VersionId></Object></Delete>")
    assert versioned.objects == [s3xml.ObjectVersion("a", "null"), s3xml.ObjectVersion("b", "v1")]
    doc = s3xml.delete_result(
        [s3xml.ObjectVersion("a"), s3xml.ObjectVersion("b", "null")],
        [s3xml.DeleteError(s3xml.ObjectVersion("c"), "AccessDenied", "no"),
         s3xml.DeleteError(s3xml.ObjectVersion("d", "v1"), "NotImplemented", "no versions")])
    parsed = _botocore_parse("DeleteObjects", doc)
    assert parsed["Deleted"] == [{"Key": "a"}, {"Key": "b", "VersionId": "null"}]
    assert [(e["Key"], e.get("VersionId"), e["Code"]) for e in parsed["Errors"]] == \
        [("c", None, "AccessDenied"), ("d", "v1", "NotImplemented")]
    quiet = _botocore_parse("DeleteObjects", s3xml.delete_result([s3xml.ObjectVersion("a")],
                                                                 quiet=True))
    assert "Deleted" not in quiet


def test_create_bucket_configuration() -> None:
    assert s3xml_parse.parse_create_bucket_configuration(b"") is None
    body = (b'<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b"<LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>")
    assert s3xml_parse.parse_create_bucket_configuration(body) == "eu-west-1"


@pytest.mark.parametrize("data", [
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]>'
    b"<Delete><Object><Key>&lol2;</Key></Object></Delete>",
    b'<!DOCTYPE Delete SYSTEM "file:///etc/passwd"><Delete/>',
    b"<Delete><Object><Key>&undefined;</Key></Object></Delete>",
    '<?xml version="1.0" encoding="UTF-16"?><Delete><Object><Key>a</Key></Object></Delete>'
    .encode("utf-16"),
    b"<Delete>" + b"x" * (s3xml_parse.MAX_XML_BYTES + 1) + b"</Delete>",
])
def test_hostile_xml_refused(data: bytes) -> None:
    with pytest.raises(RequestError) as info:
        s3xml_parse.parse_delete(data)
    assert info.value.code == "MalformedXML"


def test_iso8601() -> None:
    assert s3xml.iso8601(T0) == "2026-01-02T03:04:05.678Z"
    assert s3xml.iso8601(0) == "1970-01-01T00:00:00.000Z"
