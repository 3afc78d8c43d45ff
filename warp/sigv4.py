"""AWS Signature Version 4 for S3 requests, with ``UNSIGNED-PAYLOAD`` for bulk bodies.

Warp's ``--disable-sha256-payload``: bulk PUT bodies are not hashed (SHA-256 runs at ~1.7 GB/s
on one core here and would bound the generator); small control bodies (multipart completion,
batch delete) are hashed, as they cost nothing. The signing key is cached per day.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from s3kv.errors import ConfigError

UNSIGNED = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


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


def quote_path(path: str) -> str:
    """URI-encode a path as SigV4 wants it: every byte but unreserved ones and ``/``."""
    return urllib.parse.quote(path, safe="/-_.~")


def canonical_query(params: Mapping[str, str]) -> str:
    return "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in sorted(params.items()))


class Signer:
    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self._day = ""
        self._key = b""

    def _signing_key(self, day: str) -> bytes:
        if day != self._day:
            k = ("AWS4" + self.creds.secret_key).encode()
            for part in (day, self.creds.region, "s3", "aws4_request"):
                k = hmac.new(k, part.encode(), hashlib.sha256).digest()
            self._day, self._key = day, k
        return self._key

    def sign(self, method: str, host: str, path: str, query: str,
             headers: dict[str, str], payload_hash: str = UNSIGNED,
             now: float | None = None) -> dict[str, str]:
        """Add ``x-amz-*`` and ``Authorization`` to ``headers`` (mutated and returned).

        ``path`` must already be URI-encoded (:func:`quote_path`) and ``query`` canonical
        (:func:`canonical_query`); the request must be sent with exactly these.
        """
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
        day = stamp[:8]
        headers["host"] = host
        headers["x-amz-date"] = stamp
        headers["x-amz-content-sha256"] = payload_hash
        if self.creds.session_token:
            headers["x-amz-security-token"] = self.creds.session_token
        lower = {k.lower(): " ".join(v.strip().split()) for k, v in headers.items()}
        names = sorted(k for k in lower if k == "host" or k.startswith("x-amz-")
                       or k in ("content-md5", "range", "content-type"))
        signed = ";".join(names)
        canonical = "\n".join([
            method, path, query,
            "".join(f"{k}:{lower[k]}\n" for k in names),
            signed, payload_hash,
        ])
        scope = f"{day}/{self.creds.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope,
                             hashlib.sha256(canonical.encode()).hexdigest()])
        signature = hmac.new(self._signing_key(day), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.creds.access_key}/{scope},"
                                    f" SignedHeaders={signed}, Signature={signature}")
        return headers
