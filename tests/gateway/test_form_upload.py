"""PostObject, the browser form upload (``POST /BUCKET``, ``multipart/form-data``, its policy
and signature in the form, as browsers and minio's ``presigned_post_policy`` send it), is not
implemented: it answers the allow-list's 501 NotImplemented, not an anonymous 403 (the gateway
never reads the form's signature), whether the bucket exists or not, and stores nothing."""

from __future__ import annotations

import uuid
from typing import Any

from tests.gateway.badinput import send
from tests.gateway.conftest import Gateway


def test_a_browser_form_upload_is_refused_501(gateway: Gateway, gw_s3: Any,
                                              gw_bucket: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="formed", Body=b"original")
    boundary = uuid.uuid4().hex
    fields = {"key": "formed", "x-amz-algorithm": "AWS4-HMAC-SHA256", "policy": "e30=",
              "x-amz-credential": "ak/20260101/us-east-1/s3/aws4_request",
              "x-amz-date": "20260101T000000Z", "x-amz-signature": "0" * 64}
    form = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{n}"\r\n\r\n'
                    f"{v}\r\n".encode() for n, v in fields.items())
    form += (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n'
             f"\r\nreplaced\r\n--{boundary}--\r\n").encode()
    for bucket in (gw_bucket, f"no-such-{uuid.uuid4().hex[:8]}"):
        r = send("POST", f"{gateway.endpoint}/{bucket}", body=form,
                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert (r.status, r.code) == (501, "NotImplemented"), (r.status, r.body)
        assert r.headers.get("x-amz-request-id") or r.headers.get("X-Amz-Request-Id")
    assert gw_s3.get_object(Bucket=gw_bucket, Key="formed")["Body"].read() == b"original"
