"""An AbortMultipartUpload that arrives while a CompleteMultipartUpload of the same upload is
under way waits for its outcome: once the upload completed it is NoSuchUpload, never a 204 for
an upload that became an object anyway (it once answered 204 and the Complete still stored the
object). The Complete is held open by sending its XML body in two pieces."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.gateway.badinput import Reply, signed, signed_headers
from tests.gateway.conftest import Gateway, gateway_client

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def gateway(multipart_gateway: Gateway) -> Gateway:
    """This module's gateway (it replaces conftest's): blocks up to 16 MiB for multipart."""
    return multipart_gateway


def _complete_xml(parts: list[dict[str, Any]]) -> bytes:
    items = "".join(f"<Part><PartNumber>{p['PartNumber']}</PartNumber><ETag>{p['ETag']}</ETag>"
                    "</Part>" for p in parts)
    return f"<CompleteMultipartUpload>{items}</CompleteMultipartUpload>".encode()


def _slow_complete(url: str, body: bytes, pause: float, started: threading.Event) -> bytes:
    """POST ``body`` to ``url``: its first half, a pause, the rest; the raw answer."""
    u = urlsplit(url)
    headers = signed_headers("POST", url, body=body, payload_hash="UNSIGNED-PAYLOAD",
                             headers={"Content-Length": str(len(body))})
    head = f"POST {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()) + "Connection: close\r\n\r\n"
    with socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout=30) as s:
        s.sendall(head.encode() + body[:len(body) // 2])
        started.set()
        time.sleep(pause)
        s.sendall(body[len(body) // 2:])
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def test_abort_during_complete_waits_for_its_outcome(gateway: Gateway, gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    data = [b"a" * (5 * MiB), b"b" * 1000]
    up = s3.create_multipart_upload(Bucket=gw_bucket, Key="raced")["UploadId"]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=gw_bucket, Key="raced",
                                                      UploadId=up, PartNumber=n,
                                                      Body=d)["ETag"]}
             for n, d in enumerate(data, start=1)]
    url = f"{gateway.endpoint}/{gw_bucket}/raced?uploadId={up}"
    started, out = threading.Event(), {}
    worker = threading.Thread(target=lambda: out.update(
        complete=_slow_complete(url, _complete_xml(parts), 1.5, started)))
    worker.start()
    assert started.wait(10)
    time.sleep(0.3)  # the Complete is reading its body
    t0 = time.monotonic()
    abort: Reply = signed("DELETE", url)
    waited = time.monotonic() - t0
    worker.join(30)
    assert out["complete"].startswith(b"HTTP/1.1 200"), out["complete"][:300]
    assert (abort.status, abort.code) == (404, "NoSuchUpload"), (abort.status, abort.body[:300])
    assert waited > 0.5  # it waited for the Complete
    assert s3.get_object(Bucket=gw_bucket, Key="raced")["Body"].read() == b"".join(data)


def test_abort_then_complete_is_no_such_upload(gateway: Gateway, gw_bucket: str) -> None:
    s3 = gateway_client(gateway.endpoint)
    up = s3.create_multipart_upload(Bucket=gw_bucket, Key="gone")["UploadId"]
    etag = s3.upload_part(Bucket=gw_bucket, Key="gone", UploadId=up, PartNumber=1,
                          Body=b"x")["ETag"]
    url = f"{gateway.endpoint}/{gw_bucket}/gone?uploadId={up}"
    assert signed("DELETE", url).status == 204
    r = signed("POST", url, body=_complete_xml([{"PartNumber": 1, "ETag": etag}]))
    assert (r.status, r.code) == (404, "NoSuchUpload")
    assert (signed("DELETE", url).status, signed("DELETE", url).code) == (404, "NoSuchUpload")
    assert "Contents" not in s3.list_objects_v2(Bucket=gw_bucket, Prefix="gone")
