"""The multipart round trip of `s3kv doctor` (create, upload parts, complete, abort), signed
with :mod:`s3kv.wire.sigv4` as the gateway's own clients sign: the minio SDK, which does the
other checks, has no public calls for the single steps of a multipart upload."""

from __future__ import annotations

import hashlib
import re
from xml.sax.saxutils import escape

import urllib3

from s3kv.doctor.connect import S3Failure, split_endpoint
from s3kv.doctor.report import Target
from s3kv.wire.sigv4 import Credentials, Signer, canonical_query, quote_path

_FIELD = {name: re.compile(rf"<{name}>([^<]*)</{name}>".encode())
          for name in ("Code", "Message", "UploadId")}


def _field(name: str, body: bytes) -> str:
    m = _FIELD[name].search(body)
    return m.group(1).decode(errors="replace") if m else ""


class Multipart:
    """Multipart calls on the target's first endpoint, bucket addressed path-style."""

    def __init__(self, target: Target, http: urllib3.PoolManager) -> None:
        self.host, secure = split_endpoint(target.endpoints[0])
        self.base = f"{'https' if secure else 'http'}://{self.host}"
        self.bucket = target.bucket
        self.http = http
        self.signer = Signer(Credentials(target.access_key, target.secret_key,
                                         target.session_token, target.region))

    def _call(self, method: str, key: str, params: dict[str, str],
              body: bytes = b"") -> urllib3.BaseHTTPResponse:
        path = quote_path(f"/{self.bucket}/{key}")
        query = canonical_query(params)
        headers: dict[str, str] = {}
        self.signer.sign(method, self.host, path, query, headers,
                         payload_hash=hashlib.sha256(body).hexdigest())
        resp = self.http.request(method, f"{self.base}{path}?{query}", body=body or None,
                                 headers=headers, preload_content=True)
        data = resp.data or b""
        # CompleteMultipartUpload may answer 200 and report the error in the body
        if resp.status >= 300 or (data.lstrip().startswith(b"<?xml") and b"<Error>" in data):
            raise S3Failure(resp.status, _field("Code", data) or str(resp.status),
                            _field("Message", data))
        return resp

    def create(self, key: str) -> str:
        upload_id = _field("UploadId", self._call("POST", key, {"uploads": ""}).data)
        if not upload_id:
            raise S3Failure(200, "MalformedResponse", "CreateMultipartUpload gave no UploadId")
        return upload_id

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> str:
        resp = self._call("PUT", key, {"partNumber": str(number), "uploadId": upload_id}, data)
        return str(resp.headers.get("ETag", ""))

    def complete(self, key: str, upload_id: str, etags: list[str]) -> None:
        parts = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(etag)}</ETag></Part>"
                        for n, etag in enumerate(etags, start=1))
        body = f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()
        self._call("POST", key, {"uploadId": upload_id}, body)

    def abort(self, key: str, upload_id: str) -> None:
        self._call("DELETE", key, {"uploadId": upload_id})
