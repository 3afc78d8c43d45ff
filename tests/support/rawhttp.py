"""Raw HTTP requests to the gateway over a socket, signed with SigV4 written out here.

Clients such as boto3 normalise paths, refuse control characters and frame bodies correctly;
the security and fuzz suites need to send exactly the bytes they choose (``%2e%2e``, broken
chunked framing, huge headers, a replayed signature with another body). The signer is written
from the SigV4 specification, independently of s3kv/wire/: the canonical URI is the
path exactly as sent (S3 does not double-encode it).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, unquote

REGION = "us-east-1"
UNSIGNED = "UNSIGNED-PAYLOAD"


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def signing_key(secret: str, date: str, region: str = REGION) -> bytes:
    k = _hmac(("AWS4" + secret).encode(), date)
    return _hmac(_hmac(_hmac(k, region), "s3"), "aws4_request")


def _enc(text: str) -> str:
    return quote(text, safe="-_.~")


def _canonical_query(raw_query: str, drop: str = "") -> str:
    pairs = []
    for part in raw_query.split("&"):
        if part:
            n, _, v = part.partition("=")
            if unquote(n) != drop:
                pairs.append((_enc(unquote(n)), _enc(unquote(v))))
    return "&".join(f"{n}={v}" for n, v in sorted(pairs))


def _string_to_sign(method: str, path: str, cquery: str, headers: dict[str, str],
                    payload: str, amz_date: str, scope: str) -> tuple[str, str]:
    names = sorted(h.lower() for h in headers)
    lower = {k.lower(): " ".join(v.strip().split()) for k, v in headers.items()}
    cheaders = "".join(f"{n}:{lower[n]}\n" for n in names)
    signed = ";".join(names)
    creq = "\n".join([method, path, cquery, cheaders, signed, payload])
    # the bytes as send() puts them on the wire: a header's byte that is no UTF-8 ("\udcfc")
    # is signed as that byte
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                     hashlib.sha256(creq.encode("utf-8", "surrogateescape")).hexdigest()])
    return sts, signed


def sign(method: str, target: str, host: str, access: str, secret: str, *,
         body: bytes | None = b"", headers: dict[str, str] | None = None,
         when: datetime | None = None, payload: str | None = None) -> dict[str, str]:
    """Headers (with Authorization) for ``method target``; target = raw path[?query].

    ``payload``: the x-amz-content-sha256 value (default: the SHA-256 of ``body``)."""
    when = when or datetime.now(UTC)
    amz_date = when.strftime("%Y%m%dT%H%M%SZ")
    date = amz_date[:8]
    scope = f"{date}/{REGION}/s3/aws4_request"
    if payload is None:
        payload = hashlib.sha256(body or b"").hexdigest()
    path, _, query = target.partition("?")
    hs = {"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload,
          **(headers or {})}
    sts, signed = _string_to_sign(method, path, _canonical_query(query), hs, payload, amz_date,
                                  scope)
    sig = hmac.new(signing_key(secret, date), sts.encode(), hashlib.sha256).hexdigest()
    hs["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={access}/{scope}, "
                           f"SignedHeaders={signed}, Signature={sig}")
    return hs


def presign(method: str, target: str, host: str, access: str, secret: str, *,
            expires: int = 300, when: datetime | None = None) -> str:
    """A presigned target (path?query with X-Amz-* parameters)."""
    when = when or datetime.now(UTC)
    amz_date = when.strftime("%Y%m%dT%H%M%SZ")
    scope = f"{amz_date[:8]}/{REGION}/s3/aws4_request"
    path, _, query = target.partition("?")
    params = [("X-Amz-Algorithm", "AWS4-HMAC-SHA256"), ("X-Amz-Credential", f"{access}/{scope}"),
              ("X-Amz-Date", amz_date), ("X-Amz-Expires", str(expires)),
              ("X-Amz-SignedHeaders", "host")]
    q = "&".join([p for p in query.split("&") if p] + [f"{n}={_enc(v)}" for n, v in params])
    sts, _ = _string_to_sign(method, path, _canonical_query(q), {"host": host}, UNSIGNED,
                             amz_date, scope)
    sig = hmac.new(signing_key(secret, amz_date[:8]), sts.encode(), hashlib.sha256).hexdigest()
    return f"{path}?{q}&X-Amz-Signature={sig}"


def skewed(minutes: float) -> datetime:
    return datetime.now(UTC) + timedelta(minutes=minutes)


@dataclass
class Response:
    status: int
    reason: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def code(self) -> str | None:
        """The S3 error code (XML) or /v1 error (JSON), if the body carries one."""
        if not self.body:
            return None
        try:
            if self.body.lstrip().startswith(b"{"):
                return str(json.loads(self.body).get("error"))
            root = ET.fromstring(self.body)
        except (ValueError, ET.ParseError):
            return None
        el = root.find("Code")
        return el.text if el is not None else None


def send(port: int, method: str, target: str, headers: dict[str, str] | list[tuple[str, str]],
         body: bytes = b"", *, content_length: bool = True, timeout: float = 30.0,
         raw_head: bytes | None = None) -> Response:
    """One request on a fresh connection (``Connection: close``), the whole response read.

    ``raw_head``: send these bytes as the request head instead of building one."""
    items = list(headers.items()) if isinstance(headers, dict) else list(headers)
    if raw_head is None:
        lines = [f"{method} {target} HTTP/1.1"]
        names = {k.lower() for k, _ in items}
        if "host" not in names:
            items.append(("Host", f"127.0.0.1:{port}"))
        if content_length and "content-length" not in names and \
                "transfer-encoding" not in names:
            items.append(("Content-Length", str(len(body))))
        items.append(("Connection", "close"))
        lines += [f"{k}: {v}" for k, v in items]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
    else:
        head = raw_head
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        # the server may answer early (e.g. EntityTooLarge) and hang up: read that answer
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(head + body)
        return read_response(s, head_only=method == "HEAD")


def signed_send(port: int, method: str, target: str, access: str, secret: str,
                body: bytes = b"", headers: dict[str, str] | None = None) -> Response:
    """``method target`` signed for the gateway on loopback ``port`` and sent."""
    hs = sign(method, target, f"127.0.0.1:{port}", access, secret, body=body, headers=headers)
    return send(port, method, target, hs, body)


def read_response(s: socket.socket, *, head_only: bool = False) -> Response:
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise ConnectionError(f"connection closed before a response head: {buf[:200]!r}")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    if head.startswith(b"HTTP/1.1 1"):  # an interim response (100 Continue): the next one
        while b"\r\n\r\n" not in rest:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed after an interim response")
            rest += chunk
        head, _, rest = rest.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    _, status, reason = ([*status_line.split(" ", 2), ""])[:3]
    headers: dict[str, str] = {}
    for line in header_lines:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = headers.get("content-length")
    if head_only or status in ("204", "304"):
        return Response(int(status), reason, headers, b"")
    if length is not None:
        need = int(length)
        while len(rest) < need:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            rest += chunk
        return Response(int(status), reason, headers, rest[:need])
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        rest += chunk
    if headers.get("transfer-encoding", "").lower() == "chunked":
        rest = _dechunk(rest)
    return Response(int(status), reason, headers, rest)


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        line, _, data = data.partition(b"\r\n")
        n = int(line.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out += data[:n]
        data = data[n + 2:]
    return out


def well_formed(resp: Response, *, native: bool = False) -> str | None:
    """None if the response is well formed; else what is wrong with it.

    Well formed: status < 500 (or 503 SlowDown/ServiceUnavailable with Retry-After, or the
    documented 501 NotImplemented); an error
    (>= 400, with a body) carries an S3 XML <Error> with a <Code> (S3 front) or JSON with
    "error" (/v1)."""
    if resp.status >= 500 and not (resp.status == 503 and "retry-after" in resp.headers) and \
            not (resp.status == 501 and (resp.code == "NotImplemented" or not resp.body)):
        return f"status {resp.status}: {resp.body[:300]!r}"
    if resp.status >= 400 and resp.body:
        if native:
            try:
                doc = json.loads(resp.body)
            except ValueError:
                return f"/v1 error is not JSON: {resp.body[:200]!r}"
            if not isinstance(doc, dict) or "error" not in doc:
                return f"/v1 error without 'error': {resp.body[:200]!r}"
            return None
        try:
            root = ET.fromstring(resp.body)
        except ET.ParseError as exc:
            return f"error body is not XML ({exc}): {resp.body[:200]!r}"
        if root.tag != "Error" or root.find("Code") is None:
            return f"error body is not an S3 <Error>: {resp.body[:200]!r}"
    return None
