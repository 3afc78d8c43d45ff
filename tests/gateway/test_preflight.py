"""A browser's CORS preflight (``OPTIONS``, never signed) gets S3's answer for a bucket without
CORS rules, which every bucket of the gateway is (GetBucketCors: 404, PutBucketCors: 501): 403
AccessForbidden, or 400 BadRequest without its Origin or Access-Control-Request-Method header;
before authentication (it was 405 "not an S3 method"), the same for a missing bucket, and
nothing changes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.gateway.badinput import send
from tests.gateway.conftest import Gateway

PREFLIGHT = {"Origin": "https://app.example", "Access-Control-Request-Method": "PUT"}


@pytest.mark.parametrize(("headers", "status", "code"), [
    (PREFLIGHT, 403, "AccessForbidden"),
    ({"Access-Control-Request-Method": "PUT"}, 400, "BadRequest"),
    ({"Origin": "https://app.example"}, 400, "BadRequest"),
])
def test_a_preflight_gets_s3s_answer_for_a_bucket_without_cors(
        gateway: Gateway, gw_s3: Any, gw_bucket: str, headers: dict[str, str], status: int,
        code: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="page", Body=b"original")
    for path in (f"/{gw_bucket}/page", f"/{gw_bucket}", f"/no-such-{uuid.uuid4().hex[:8]}/k"):
        r = send("OPTIONS", gateway.endpoint + path, headers=headers)
        assert (r.status, r.code) == (status, code), (path, r.status, r.body)
        assert "Access-Control-Allow-Origin" not in r.headers
    assert gw_s3.get_object(Bucket=gw_bucket, Key="page")["Body"].read() == b"original"
