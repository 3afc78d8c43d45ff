"""Our SigV4 signer agrees with botocore's for the same request and time (UNSIGNED-PAYLOAD)."""

from __future__ import annotations

import calendar
import time

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from s3kv.wire.sigv4 import UNSIGNED, Credentials, Signer, canonical_query, quote_path


class _UnsignedPayloadAuth(S3SigV4Auth):
    """botocore's S3 signer, told not to hash the payload (its HTTPS behaviour)."""

    def payload(self, request: AWSRequest) -> str:
        return UNSIGNED


def test_signature_matches_botocore() -> None:
    url_path = quote_path("/bucket/dir/key with space+plus.obj")
    query = canonical_query({"partNumber": "3", "uploadId": "a/b=c"})
    req = AWSRequest(method="PUT", url=f"http://127.0.0.1:9000{url_path}?{query}",
                     headers={"Range": "bytes=0-9", "x-amz-content-sha256": UNSIGNED})
    _UnsignedPayloadAuth(BotoCredentials("AKID", "SECRET"), "s3", "eu-west-1").add_auth(req)
    stamp = req.headers["X-Amz-Date"]
    now = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
    ours = Signer(Credentials("AKID", "SECRET", region="eu-west-1")).sign(
        "PUT", "127.0.0.1:9000", url_path, query, {"Range": "bytes=0-9"}, now=now)
    assert ours["Authorization"] == req.headers["Authorization"]
    assert ours["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
