"""Numbers in requests are ASCII digits only. ``str.isdigit()`` also takes other Unicode
digits: a superscript ``²`` passed the check and then failed ``int()`` (ValueError: a 500
InternalError), an Arabic-Indic one (``\\u0661``) passed both and was read as 1. Both are
now the request's 400, as any other number that is not one. Raw signed requests to a real
gateway process."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway.conftest import GW_ACCESS, GW_SECRET, Gateway
from tests.support import rawhttp

pytestmark = pytest.mark.usefixtures("no_server_errors")

SUPERSCRIPT_TWO, ARABIC_ONE = "\u00b2", "\u0661"


def _setup(gw_s3: Any, bucket: str) -> str:
    gw_s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    uid: str = gw_s3.create_multipart_upload(Bucket=bucket, Key="m")["UploadId"]
    gw_s3.upload_part(Bucket=bucket, Key="m", UploadId=uid, PartNumber=1, Body=b"p")
    return uid


def _cases(b: str, uid: str, d: str) -> list[tuple[str, str, dict[str, str], bytes, str]]:
    q = "%C2%B2" if d == SUPERSCRIPT_TWO else "%D9%A1"  # the digit percent-encoded
    complete = (f"<CompleteMultipartUpload><Part><PartNumber>{d}</PartNumber><ETag>x</ETag>"
                "</Part></CompleteMultipartUpload>").encode()
    return [
        ("GET", f"/{b}/m?uploadId={uid}&part-number-marker={q}", {}, b"", "InvalidArgument"),
        ("GET", f"/?max-buckets={q}", {}, b"", "InvalidArgument"),
        ("PUT", f"/{b}/m?partNumber=2&uploadId={uid}",
         {"x-amz-copy-source": f"{b}/k", "x-amz-copy-source-range": f"bytes={d}-3"}, b"",
         "InvalidArgument"),
        ("GET", f"/{b}/k?partNumber={q}", {}, b"", "InvalidArgument"),
        ("PUT", f"/{b}/m?partNumber={q}&uploadId={uid}", {}, b"x", "InvalidArgument"),
        ("POST", f"/{b}/m?uploadId={uid}", {}, complete, "InvalidArgument"),
        ("GET", f"/{b}/k?attributes",
         {"x-amz-object-attributes": "ObjectParts", "x-amz-part-number-marker": d}, b"",
         "InvalidArgument"),
        ("DELETE", f"/{b}/k", {"x-amz-if-match-size": d}, b"", "InvalidArgument"),
        ("GET", f"/{b}?list-type=2&max-keys={q}", {}, b"", "InvalidArgument"),
        ("GET", f"/{b}/m?uploadId={uid}&max-parts={q}", {}, b"", "InvalidArgument"),
    ]


@pytest.mark.parametrize("digit", [SUPERSCRIPT_TWO, ARABIC_ONE])
def test_a_number_that_is_not_ascii_digits(gateway: Gateway, gw_s3: Any, gw_bucket: str,
                                           digit: str) -> None:
    uid = _setup(gw_s3, gw_bucket)
    host = f"127.0.0.1:{gateway.port}"
    got = []
    for method, target, headers, body, code in _cases(gw_bucket, uid, digit):
        signed = rawhttp.sign(method, target, host, GW_ACCESS, GW_SECRET, body=body,
                              headers=headers)
        r = rawhttp.send(gateway.port, method, target, signed, body)
        got.append((method, target, r.status, r.code, code))
    assert [g for g in got if (g[2], g[3]) != (400, g[4])] == [], got
    # nothing changed: the object is whole, the upload has its one part
    assert gw_s3.get_object(Bucket=gw_bucket, Key="k")["Body"].read() == b"0123456789"
    parts = gw_s3.list_parts(Bucket=gw_bucket, Key="m", UploadId=uid)["Parts"]
    assert [p["PartNumber"] for p in parts] == [1]


@pytest.mark.parametrize("digit", [SUPERSCRIPT_TWO, ARABIC_ONE])
def test_a_sigv2_presigned_expiry_that_is_not_ascii_digits(gateway: Gateway, gw_s3: Any,
                                                           gw_bucket: str, digit: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"v")
    q = "%C2%B2" if digit == SUPERSCRIPT_TWO else "%D9%A1"
    target = f"/{gw_bucket}/k?AWSAccessKeyId={GW_ACCESS}&Signature=abc&Expires={q}"
    r = rawhttp.send(gateway.port, "GET", target, {})
    assert (r.status, r.code) == (400, "AuthorizationQueryParametersError"), r.body
