"""AWS Signature Version 2 for S3 (``Authorization: AWS key:sig`` and presigned
``AWSAccessKeyId``/``Signature``/``Expires``): the string to sign, HMAC-SHA1, and a verifier.

Pure: no I/O, no clock reads (the caller passes ``now``). The string to sign is S3's
(RESTAuthentication): ``VERB\\nContent-MD5\\nContent-Type\\nDate\\n`` + the ``x-amz-*`` headers
(lowercase, sorted, repeated values joined by ``,``) + the resource: ``/bucket`` (virtual-hosted
requests) and the path as sent (a path-style bucket's ``/bucket`` also as ``/bucket/``, the
form botocore's S3 client signs a bucket's operations in), then the subresources of
:data:`SIGNED_SUBRESOURCES` in name order, their values percent-decoded, as botocore's
HmacV1Auth and s3cmd write it.

Date line: a presigned URL signs its ``Expires``; header auth signs the ``Date`` header, or an
empty line when ``x-amz-date`` is given (the AWS documentation's rule; botocore signs the Date
header it sends alongside, so both forms are accepted). Expiry and skew rules are SigV4's: a
request time more than 15 minutes off is RequestTimeTooSkewed, an ``Expires`` in the past is
AccessDenied, one more than 7 days ahead is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import quote, unquote

from s3kv.errors import RequestError
from s3kv.wire.headers import is_decimal

MAX_SKEW_SECONDS = 15 * 60
MAX_PRESIGN_EXPIRES = 7 * 24 * 3600

#: the query parameters that are part of the signed resource (botocore's list and s3cmd's)
SIGNED_SUBRESOURCES = frozenset({
    "accelerate", "acl", "analytics", "cors", "defaultObjectAcl", "delete", "inventory",
    "lifecycle", "location", "logging", "metrics", "notification", "object-lock", "partNumber",
    "policy", "replication", "requestPayment", "restore", "select", "select-type",
    "storageClass", "tagging", "torrent", "uploadId", "uploads", "versionId", "versioning",
    "versions", "website", "response-content-type", "response-content-language",
    "response-expires", "response-cache-control", "response-content-disposition",
    "response-content-encoding"})


def _values(headers: Mapping[str, str], name: str) -> list[str]:
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return [str(v) for v in getall(name, [])]
    lname = name.lower()
    return [v for k, v in headers.items() if k.lower() == lname]


def canonical_resource(raw_path: str, raw_query: str, bucket_in_host: str = "") -> str:
    """``/bucket/key?sub=value&...`` as SigV2 signs it (``raw_path``/``raw_query`` as sent).
    A subresource with an empty value (``?uploads=``, as Go's url.Values writes it) is signed
    bare, as S3 signs it: its value is appended only if it has one."""
    resource = (f"/{bucket_in_host}" if bucket_in_host else "") + (raw_path or "/")
    subs: list[tuple[str, str | None]] = []
    for part in raw_query.split("&"):
        name, sep, value = part.partition("=")
        if name in SIGNED_SUBRESOURCES:
            subs.append((name, unquote(value) if sep and value else None))
    subs.sort(key=lambda nv: nv[0])
    if subs:
        resource += "?" + "&".join(n if v is None else f"{n}={v}" for n, v in subs)
    return resource


def string_to_sign(method: str, raw_path: str, raw_query: str, headers: Mapping[str, str],
                   date_line: str, bucket_in_host: str = "") -> str:
    """The SigV2 string to sign; ``headers`` may be a multidict (repeated ``x-amz-*`` kept)."""
    md5 = ",".join(v.strip() for v in _values(headers, "content-md5"))
    ctype = ",".join(v.strip() for v in _values(headers, "content-type"))
    amz: dict[str, str] = {}
    for name in {k.lower() for k in headers if k.lower().startswith("x-amz-")}:
        # values trimmed, inner whitespace kept: AWS's SigV2 rules and botocore's HmacV1 (a
        # collapsed "0  0" was a SignatureDoesNotMatch for botocore-signed requests)
        amz[name] = ",".join(v.strip() for v in _values(headers, name))
    lines = [method.upper(), md5, ctype, date_line]
    lines += [f"{n}:{amz[n]}" for n in sorted(amz)]
    lines.append(canonical_resource(raw_path, raw_query, bucket_in_host))
    return "\n".join(lines)


def sign(secret: str, text: str) -> str:
    """Base64 of HMAC-SHA1(secret, text): the SigV2 signature."""
    digest = hmac.new(secret.encode(), text.encode("utf-8", "surrogateescape"),
                      hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def presign_query(access_key: str, secret: str, method: str, raw_path: str, expires: int,
                  raw_query: str = "", bucket_in_host: str = "") -> str:
    """The query of a SigV2 presigned URL valid until the epoch second ``expires``."""
    sig = sign(secret, string_to_sign(method, raw_path, raw_query, {}, str(expires),
                                      bucket_in_host))
    auth = (f"AWSAccessKeyId={quote(access_key, safe='')}&Expires={expires}"
            f"&Signature={quote(sig, safe='')}")
    return f"{raw_query}&{auth}" if raw_query else auth


def is_v2(raw_query_params: Mapping[str, list[str]], headers: Mapping[str, str]) -> bool:
    """Is the request signed with SigV2 (header ``AWS key:sig`` or ``AWSAccessKeyId`` query)?"""
    if "AWSAccessKeyId" in raw_query_params or "Signature" in raw_query_params:
        return True
    auth = _values(headers, "authorization")
    return bool(auth) and auth[0].strip().startswith("AWS ")


@dataclass(frozen=True)
class V2Auth:
    access_key: str
    presigned: bool


def _bad(code: str, message: str, status: int = 400) -> RequestError:
    return RequestError(code, message, status)


def _timestamp(now: datetime | float) -> float:
    return now.timestamp() if isinstance(now, datetime) else float(now)


class SigV2Verifier:
    """Verifies SigV2-signed S3 requests against ``credentials`` (access key -> secret)."""

    def __init__(self, credentials: Mapping[str, str]) -> None:
        self._credentials = dict(credentials)

    def verify(self, method: str, raw_path: str, raw_query: str, headers: Mapping[str, str],
               params: Mapping[str, list[str]], now: datetime | float, *,
               bucket_in_host: str = "") -> V2Auth:
        """``params``: the decoded query (name -> values); the signed headers are ``headers``
        (a presigned URL's hoisted ``x-amz-*`` must be sent as headers too, see the caller)."""
        auth = _values(headers, "authorization")
        presigned = "AWSAccessKeyId" in params or "Signature" in params
        if auth and presigned:
            raise _bad("InvalidArgument", "Only one auth mechanism allowed; only the "
                       "Signature query parameter or the Authorization header may be given")
        t = _timestamp(now)
        if presigned:
            access_key, signature, date_lines = self._presigned(params, t)
        else:
            access_key, signature, date_lines = self._header(auth[0].strip(), headers, t)
        secret = self._credentials.get(access_key)
        if secret is None:
            raise _bad("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist "
                       "in our records.", 403)
        paths = [raw_path or "/"]
        normalised = quote(unquote(raw_path or "/"), safe="/~")
        if normalised != paths[0]:
            paths.append(normalised)
        if not bucket_in_host and len(paths[0]) > 1 and paths[0].count("/") == 1:
            paths.append(paths[0] + "/")  # a bucket signed as S3 resolves it: "/bucket/"
        given = signature.encode("utf-8", "surrogateescape")
        ok = False
        for path in paths:
            for date_line in date_lines:
                expected = sign(secret, string_to_sign(method, path, raw_query, headers, date_line,
                                                       bucket_in_host))
                ok = hmac.compare_digest(expected.encode(), given) or ok
        if not ok:
            raise _bad("SignatureDoesNotMatch", "The request signature we calculated does not "
                       "match the signature you provided. Check your key and signing method.",
                       403)
        return V2Auth(access_key, presigned)

    def _header(self, auth: str, headers: Mapping[str, str], now: float
                ) -> tuple[str, str, list[str]]:
        _, _, cred = auth.partition(" ")
        access_key, sep, signature = cred.strip().rpartition(":")
        if not sep or not access_key or not signature:
            raise _bad("AuthorizationHeaderMalformed", "The authorization header is malformed; "
                       "expecting 'AWS <AccessKeyId>:<Signature>'.")
        amz_date = _values(headers, "x-amz-date")
        date = _values(headers, "date")
        raw = (amz_date or date or [""])[0].strip()
        try:
            when = parsedate_to_datetime(raw).astimezone(UTC).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):  # Overflow: past year 9999
            raise _bad("AccessDenied", "AWS authentication requires a valid Date or x-amz-date "
                       "header", 403) from None
        if abs(now - when) > MAX_SKEW_SECONDS:
            raise _bad("RequestTimeTooSkewed", "The difference between the request time and the "
                       "server's time is too large.", 403)
        lines = [date[0].strip()] if date else []
        if amz_date:
            lines.append("")
        return access_key, signature, lines or [""]

    def _presigned(self, params: Mapping[str, list[str]], now: float
                   ) -> tuple[str, str, list[str]]:
        def one(name: str) -> str:
            values = params.get(name)
            if not values or len(values) != 1 or not values[0]:
                raise _bad("AuthorizationQueryParametersError", "Query-string authentication "
                           "requires the AWSAccessKeyId, Signature and Expires parameters "
                           f"({name} is missing or repeated).")
            return values[0]

        access_key, signature, raw_expires = one("AWSAccessKeyId"), one("Signature"), \
            one("Expires")
        if not is_decimal(raw_expires):
            raise _bad("AuthorizationQueryParametersError", "Expires must be a number of "
                       "seconds since the epoch.")
        expires = int(raw_expires)
        if now > expires:
            raise _bad("AccessDenied", "Request has expired", 403)
        if expires - now > MAX_PRESIGN_EXPIRES + MAX_SKEW_SECONDS:
            raise _bad("AuthorizationQueryParametersError", "Expires must be less than a week "
                       "(604800 seconds) from now.")
        return access_key, signature, [raw_expires]
