"""Raw and botocore-signed requests for the bad-input tests, and what they check afterwards:
nothing half-written readable, the gateway healthy, no 5xx in its request counters."""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from urllib.parse import quote, urlsplit

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.support.gateway import GW_ACCESS, GW_SECRET, Gateway, gateway_client
from tests.support.s3server import REGION


def error_of(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str]:
    """The HTTP status and S3 error code of a botocore error raised in a ``pytest.raises``."""
    resp = exc.value.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"]["Code"]


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def code(self) -> str:
        text = self.body.decode(errors="replace")
        if "<Code>" not in text:
            return ""
        return text.split("<Code>", 1)[1].split("</Code>", 1)[0]


def signed_headers(method: str, url: str, *, body: bytes = b"", headers: dict[str, str] | None
                   = None, secret: str = GW_SECRET, payload_hash: str | None = None,
                   host: str | None = None) -> dict[str, str]:
    """Headers of a request signed as botocore signs it (SigV4, header auth)."""
    hdrs = dict(headers or {})
    if host is not None:
        hdrs["Host"] = host
    req = AWSRequest(method=method, url=url, data=body, headers=hdrs)
    _Signer(Credentials(GW_ACCESS, secret), payload_hash).add_auth(req)
    return dict(req.headers.items())


class _Signer(S3SigV4Auth):  # type: ignore[misc]
    """botocore's S3 signer with the x-amz-content-sha256 value of our choosing (None: the
    real SHA-256 of the body), so a test can sign UNSIGNED-PAYLOAD or a wrong digest."""

    def __init__(self, creds: Credentials, payload_hash: str | None) -> None:
        super().__init__(creds, "s3", REGION)
        self._payload_hash = payload_hash

    def payload(self, request: AWSRequest) -> str:
        if self._payload_hash is not None:
            return self._payload_hash
        return str(super().payload(request))


def send(method: str, url: str, *, body: bytes = b"", headers: dict[str, str] | None = None
         ) -> Reply:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        hdrs = dict(headers or {})
        conn.putrequest(method, path, skip_host="Host" in hdrs, skip_accept_encoding=True)
        for k, v in hdrs.items():
            conn.putheader(k, v)
        if body and "Content-Length" not in hdrs:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body or None)
        resp = conn.getresponse()
        return Reply(resp.status, dict(resp.getheaders()), resp.read())
    finally:
        conn.close()


def signed(method: str, url: str, *, body: bytes = b"", headers: dict[str, str] | None = None,
           secret: str = GW_SECRET) -> Reply:
    return send(method, url, body=body,
                headers=signed_headers(method, url, body=body, headers=headers, secret=secret))


def assert_absent(gateway: Gateway, bucket: str, key: str) -> None:
    """The key is neither readable nor listed."""
    url = f"{gateway.endpoint}/{bucket}/{quote(key, safe='/')}"
    r = signed("GET", url)
    assert (r.status, r.code) == (404, "NoSuchKey"), r.body[:300]
    s3 = gateway_client(gateway.endpoint)
    listed = s3.list_objects_v2(Bucket=bucket)
    assert key not in [o["Key"] for o in listed.get("Contents", [])]


def assert_healthy(gateway: Gateway) -> None:
    with urllib.request.urlopen(gateway.endpoint + "/healthz", timeout=5) as resp:
        assert resp.status == 200
    assert gateway.proc is not None and gateway.proc.poll() is None


def server_errors(gateway: Gateway) -> dict[str, float]:
    """The gateway's request counters of 5xx answers other than 503, by series."""
    text = urllib.request.urlopen(gateway.endpoint + "/metrics").read().decode()
    return {series: float(count) for series, _, count in (
        line.rpartition(" ") for line in text.splitlines()
        if line.startswith("s3kv_requests_total{") and 'status="5' in line
        and 'status="503"' not in line)}

