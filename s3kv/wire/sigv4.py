"""AWS Signature Version 4 for S3, written once for both sides.

The canonical query, the canonical request, the credential scope, the string to sign (of a
request and of an aws-chunked chunk), the signing key and the signature are computed here and
nowhere else: by :class:`Signer` (warp, the S3 backend's ranged reads) and by
:class:`~s3kv.wire.sigv4_verify.SigV4Verifier` (the gateway) alike, so the two halves cannot
drift apart. Also the values ``x-amz-content-sha256`` takes (:class:`PayloadMode`).

The signer is warp's ``--disable-sha256-payload``: bulk PUT bodies are not hashed (SHA-256 runs
at ~1.7 GB/s on one core here and would bound the generator); small control bodies (multipart
completion, batch delete) are hashed, as they cost nothing. Its signing key is cached per day.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from s3kv.errors import ConfigError, RequestError

ALGORITHM = "AWS4-HMAC-SHA256"
#: ``x-amz-content-sha256`` of a body that is not hashed
UNSIGNED = "UNSIGNED-PAYLOAD"
#: ``x-amz-content-sha256`` of an empty body (GET, HEAD, DELETE)
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
AMZ_DATE_FMT = "%Y%m%dT%H%M%SZ"
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_SPACES = re.compile(r" +")


class PayloadMode(enum.Enum):
    """What ``x-amz-content-sha256`` announced about the body."""

    SIGNED = "signed"  # a hex SHA-256 of the whole body
    UNSIGNED = UNSIGNED
    STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
    STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"

    @property
    def streaming(self) -> bool:
        return self.value.startswith("STREAMING-")

    @property
    def chunk_signed(self) -> bool:
        return self in (PayloadMode.STREAMING_SIGNED, PayloadMode.STREAMING_SIGNED_TRAILER)

    @property
    def trailer(self) -> bool:
        return self.value.endswith("-TRAILER")


_LITERAL_MODES = {m.value: m for m in PayloadMode if m is not PayloadMode.SIGNED}


def parse_payload_mode(value: str) -> tuple[PayloadMode, str | None]:
    """``x-amz-content-sha256`` -> (mode, lowercase hex digest when the payload is signed)."""
    mode = _LITERAL_MODES.get(value)
    if mode is not None:
        return mode, None
    if _HEX64.match(value):
        return PayloadMode.SIGNED, value.lower()
    raise RequestError("InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, "
                       "STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, "
                       "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a valid sha256 value.")


# -- the algorithm ---------------------------------------------------------------------------

def hmac_sha256(key: bytes, msg: str | bytes) -> bytes:
    return hmac.new(key, msg.encode() if isinstance(msg, str) else msg, hashlib.sha256).digest()


def derive_signing_key(secret: str, date: str, region: str, service: str = "s3") -> bytes:
    k = hmac_sha256(("AWS4" + secret).encode(), date)
    k = hmac_sha256(k, region)
    k = hmac_sha256(k, service)
    return hmac_sha256(k, "aws4_request")


def uri_encode(text: str, *, keep_slash: bool) -> str:
    """RFC 3986 encoding as SigV4 defines it: everything but A-Z a-z 0-9 - _ . ~ (and '/')."""
    return quote(text, safe="/~" if keep_slash else "~")


def quote_path(path: str) -> str:
    """URI-encode a path as SigV4 wants it: every byte but unreserved ones and ``/``."""
    return uri_encode(path, keep_slash=True)


def canonical_query(query: str | Mapping[str, str], *, drop: str | None = None) -> str:
    """The canonical query string: names and values encoded strictly, sorted by name then value,
    repeated names kept. ``query``: as on the request line (each part is decoded first) or the
    decoded parameters; ``drop``: a parameter left out (a presigned URL's X-Amz-Signature)."""
    if not query:
        return ""
    if isinstance(query, str):
        split = (part.partition("=") for part in query.split("&") if part)
        items: Iterable[tuple[str, str]] = ((unquote(n), unquote(v)) for n, _, v in split)
    else:
        items = query.items()
    pairs = [(uri_encode(n, keep_slash=False), uri_encode(v, keep_slash=False))
             for n, v in items]
    if drop is not None:
        pairs = [p for p in pairs if p[0] != drop]
    pairs.sort()
    return "&".join(f"{n}={v}" for n, v in pairs)


def trim(value: str) -> str:
    """A header value as it is signed: stripped, runs of spaces made one."""
    value = value.strip()
    return _SPACES.sub(" ", value) if "  " in value else value


def canonical_request(method: str, path: str, query: str, headers: Iterable[tuple[str, str]],
                      signed_headers: str, payload_hash: str) -> str:
    """``headers``: (lowercase name, trimmed value) for each signed header, in the order of
    ``signed_headers`` (the names joined by ``;``); ``path`` encoded, ``query`` canonical."""
    return "\n".join([method, path, query, "".join([f"{n}:{v}\n" for n, v in headers]),
                      signed_headers, payload_hash])


def credential_scope(date: str, region: str, service: str = "s3") -> str:
    return f"{date}/{region}/{service}/aws4_request"


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    """``canonical`` hashed as the bytes it came from: a header's byte that is no UTF-8, which
    the HTTP parser kept as a surrogate (``\udce9``), is that byte again, as the client signed
    it (strict UTF-8 raised UnicodeEncodeError: a 500 for a Latin-1 header value)."""
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogateescape")).hexdigest()
    return "\n".join([ALGORITHM, amz_date, scope, digest])


def chunk_string_to_sign(kind: str, amz_date: str, scope: str, previous: str,
                         digest: str) -> str:
    """An aws-chunked chunk's (``kind`` AWS4-HMAC-SHA256-PAYLOAD) or trailer's
    (AWS4-HMAC-SHA256-TRAILER): chained from the ``previous`` signature."""
    return "\n".join([kind, amz_date, scope, previous, digest])


def signature(signing_key: bytes, to_sign: str) -> str:
    return hmac.digest(signing_key, to_sign.encode(), "sha256").hex()


# -- the signer ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    session_token: str = ""
    region: str = "us-east-1"

    @classmethod
    def from_environment(cls, region: str = "") -> Credentials:
        """The standard AWS variables, else botocore's chain (profiles, config files)."""
        region = (region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                  or "us-east-1")
        access = os.environ.get("AWS_ACCESS_KEY_ID", "")
        secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
        token = os.environ.get("AWS_SESSION_TOKEN", "")
        if not (access and secret):
            import botocore.session

            found = botocore.session.get_session().get_credentials()
            if found is None:
                raise ConfigError("no S3 credentials: set AWS_ACCESS_KEY_ID and "
                                  "AWS_SECRET_ACCESS_KEY (or an AWS profile)")
            frozen = found.get_frozen_credentials()
            access, secret, token = frozen.access_key, frozen.secret_key, frozen.token or ""
        return cls(access, secret, token, region)


class Signer:
    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self._day = ""
        self._key = b""

    def _signing_key(self, day: str) -> bytes:
        if day != self._day:
            self._day = day
            self._key = derive_signing_key(self.creds.secret_key, day, self.creds.region)
        return self._key

    def sign(self, method: str, host: str, path: str, query: str,
             headers: dict[str, str], payload_hash: str = UNSIGNED,
             now: float | None = None) -> dict[str, str]:
        """Add ``x-amz-*`` and ``Authorization`` to ``headers`` (mutated and returned).

        ``path`` must already be URI-encoded (:func:`quote_path`) and ``query`` canonical
        (:func:`canonical_query`); the request must be sent with exactly these.
        """
        stamp = time.strftime(AMZ_DATE_FMT, time.gmtime(time.time() if now is None else now))
        day = stamp[:8]
        headers["host"] = host
        headers["x-amz-date"] = stamp
        headers["x-amz-content-sha256"] = payload_hash
        if self.creds.session_token:
            headers["x-amz-security-token"] = self.creds.session_token
        lower = {k.lower(): trim(v) for k, v in headers.items()}
        names = sorted(k for k in lower if k == "host" or k.startswith("x-amz-")
                       or k in ("content-md5", "range", "content-type"))
        signed = ";".join(names)
        canonical = canonical_request(method, path, query, ((k, lower[k]) for k in names),
                                      signed, payload_hash)
        scope = credential_scope(day, self.creds.region)
        sig = signature(self._signing_key(day), string_to_sign(stamp, scope, canonical))
        headers["Authorization"] = (f"{ALGORITHM} Credential={self.creds.access_key}/{scope},"
                                    f" SignedHeaders={signed}, Signature={sig}")
        return headers

    def presign(self, method: str, host: str, path: str, expires: int,
                now: float | None = None) -> str:
        """The query of a presigned URL for ``method path`` on ``host``, valid ``expires``
        seconds from ``now``: only ``host`` is signed (a Range header may be added), the
        payload is not (``path`` URI-encoded as for :meth:`sign`)."""
        stamp = time.strftime(AMZ_DATE_FMT, time.gmtime(time.time() if now is None else now))
        scope = credential_scope(stamp[:8], self.creds.region)
        params = {"X-Amz-Algorithm": ALGORITHM,
                  "X-Amz-Credential": f"{self.creds.access_key}/{scope}",
                  "X-Amz-Date": stamp, "X-Amz-Expires": str(expires),
                  "X-Amz-SignedHeaders": "host"}
        if self.creds.session_token:
            params["X-Amz-Security-Token"] = self.creds.session_token
        query = canonical_query(params)
        canonical = canonical_request(method, path, query, [("host", host)], "host", UNSIGNED)
        sig = signature(self._signing_key(stamp[:8]), string_to_sign(stamp, scope, canonical))
        return f"{query}&X-Amz-Signature={sig}"
