"""AWS Signature Version 4 verification for S3 requests: header auth and presigned URLs.

Pure: no I/O, no clock reads (the caller passes ``now``). The gateway calls
:meth:`SigV4Verifier.verify` with the request line and headers exactly as received and gets an
:class:`AuthContext` back, or a :class:`~s3kv.errors.RequestError` carrying the S3 error code.

S3 specifics honoured here: the canonical URI is the path as the client sent it (S3 does not
double-encode; a client that left reserved characters raw but signed them encoded is accepted
through a second, normalised candidate); the query is re-encoded and sorted; the payload hash
line is the ``x-amz-content-sha256`` header (``UNSIGNED-PAYLOAD`` for presigned URLs unless
``X-Amz-Content-Sha256`` is in the query). Unsigned ``x-amz-*`` headers are tolerated (SDKs
differ on which they sign); every header that *is* listed in SignedHeaders is covered.

The canonical request, string to sign and signing key are :mod:`s3kv.wire.sigv4`'s, the ones
the signer uses.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import NamedTuple
from urllib.parse import unquote

from s3kv.errors import RequestError
from s3kv.wire.headers import is_decimal
from s3kv.wire.sigv4 import (
    ALGORITHM,
    AMZ_DATE_FMT,
    PayloadMode,
    canonical_query,
    canonical_request,
    credential_scope,
    derive_signing_key,
    parse_payload_mode,
    signature,
    string_to_sign,
    trim,
    uri_encode,
)

MAX_SKEW = timedelta(minutes=15)
MAX_PRESIGN_EXPIRES = 7 * 24 * 3600
_STAMP = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})Z")
_SIG_RE = re.compile(r"^[0-9a-f]{64}$")


class AuthContext(NamedTuple):
    """The outcome of a successful verification; the body reader needs the signing fields."""

    access_key: str
    region: str
    date: str  # scope date, YYYYMMDD
    amz_date: str  # request timestamp, YYYYMMDDTHHMMSSZ (the one in the string to sign)
    scope: str  # YYYYMMDD/region/s3/aws4_request
    signing_key: bytes
    seed_signature: str  # the request signature; chunk signatures chain from it
    payload_mode: PayloadMode
    content_sha256: str | None  # lowercase hex when payload_mode is SIGNED
    presigned: bool


def _bad(code: str, message: str, status: int = 400) -> RequestError:
    return RequestError(code, message, status)


def query_params(raw_query: str) -> dict[str, list[str]]:
    """Decoded query parameters, repeated names kept in order (``+`` is literal, as S3 reads it)."""
    out: dict[str, list[str]] = {}
    for part in raw_query.split("&"):
        if part:
            name, _, value = part.partition("=")
            out.setdefault(unquote(name), []).append(unquote(value))
    return out


def header_values(headers: Mapping[str, str], name: str) -> list[str]:
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return list(getall(name, []))
    value = headers.get(name)
    return [] if value is None else [value]


def signed_header_values(headers: Mapping[str, str], signed: list[str]) -> list[tuple[str, str]]:
    """(name, value) of each signed header, repeated headers' trimmed values joined by ``,``."""
    out = []
    for name in signed:
        values = header_values(headers, name)
        out.append((name, trim(values[0]) if len(values) == 1
                    else ",".join(trim(v) for v in values)))
    return out


def parse_stamp(text: str) -> datetime:
    """YYYYMMDDTHHMMSSZ as an aware UTC datetime (ValueError if it is not one); what
    ``strptime`` does, in under half its time (it runs on every request)."""
    m = _STAMP.fullmatch(text)
    if m is None:
        raise ValueError(f"not a YYYYMMDDTHHMMSSZ stamp: {text!r}")
    y, mo, d, h, mi, s = (int(g) for g in m.groups())
    return datetime(y, mo, d, h, mi, s, tzinfo=UTC)


#: x-amz-date -> seconds since the epoch; every request of the same second has the same one
_STAMP_SECONDS: dict[str, float] = {}


def _amz_date_seconds(text: str, what: str) -> float:
    """``parse_stamp(text).timestamp()``, remembered for the last few stamps seen."""
    seconds = _STAMP_SECONDS.get(text)
    if seconds is None:
        try:
            seconds = parse_stamp(text).timestamp()
        except ValueError:
            raise _bad("AccessDenied", f"invalid {what} {text!r}: expected YYYYMMDDTHHMMSSZ",
                       403) from None
        if len(_STAMP_SECONDS) >= 64:
            _STAMP_SECONDS.clear()
        _STAMP_SECONDS[text] = seconds
    return seconds


def _as_datetime(now: datetime | float) -> datetime:
    if isinstance(now, datetime):
        return now if now.tzinfo else now.replace(tzinfo=UTC)
    return datetime.fromtimestamp(now, UTC)


def _as_seconds(now: datetime | float) -> float:
    return _as_datetime(now).timestamp() if isinstance(now, datetime) else now


def has_auth(raw_query: str, headers: Mapping[str, str]) -> bool:
    """Does the request carry a signature at all (Authorization header or presigned query)?"""
    return bool(header_values(headers, "authorization")) or "X-Amz-Algorithm" in \
        query_params(raw_query)


class SigV4Verifier:
    """Verifies SigV4-signed S3 requests against ``credentials`` (access key -> secret).

    ``region``: when set, the credential scope must name it; otherwise any region the client
    signed with is accepted (clients default to us-east-1 and users set anything).
    """

    def __init__(self, credentials: Mapping[str, str], *, region: str | None = None,
                 max_skew: timedelta = MAX_SKEW) -> None:
        self._credentials = dict(credentials)
        self._region = region
        self._max_skew = max_skew
        self._max_skew_seconds = max_skew.total_seconds()
        #: Credential= value -> (access key, date, region), once checked
        self._scopes: dict[str, tuple[str, str, str]] = {}
        self._keys: dict[tuple[str, str, str], bytes] = {}

    def _signing_key(self, access_key: str, date: str, region: str) -> bytes:
        cache_key = (access_key, date, region)
        key = self._keys.get(cache_key)
        if key is None:
            if len(self._keys) > 256:
                self._keys.clear()
            key = derive_signing_key(self._credentials[access_key], date, region)
            self._keys[cache_key] = key
        return key

    def verify(self, method: str, raw_path: str, raw_query: str, headers: Mapping[str, str],
               now: datetime | float) -> AuthContext:
        """Verify a request; ``raw_path``/``raw_query`` as on the request line (still encoded)."""
        has_header = bool(header_values(headers, "authorization"))
        params = query_params(raw_query)
        presigned = "X-Amz-Signature" in params or "X-Amz-Algorithm" in params
        if has_header and presigned:
            raise _bad("InvalidArgument", "Only one auth mechanism allowed; only the "
                       "X-Amz-Algorithm query parameter or the Authorization header may be given")
        if presigned:
            return self._verify_presigned(method, raw_path, raw_query, params, headers,
                                          _as_datetime(now))
        if has_header:
            return self._verify_header(method, raw_path, raw_query, headers, _as_seconds(now))
        raise _bad("AccessDenied", "Access Denied: the request is not signed", 403)

    # -- header auth ------------------------------------------------------------------------

    def _verify_header(self, method: str, raw_path: str, raw_query: str,
                       headers: Mapping[str, str], now: float) -> AuthContext:
        auth = header_values(headers, "authorization")[0].strip()
        algorithm, _, rest = auth.partition(" ")
        if algorithm != ALGORITHM:
            if algorithm == "AWS":
                raise _bad("InvalidRequest", "The authorization mechanism you have provided is "
                           "not supported. Please use AWS4-HMAC-SHA256.")
            raise _bad("AuthorizationHeaderMalformed",
                       f"unsupported authorization algorithm {algorithm!r}; use {ALGORITHM}")
        fields: dict[str, str] = {}
        for item in rest.split(","):
            name, sep, value = item.strip().partition("=")
            if not sep or name in fields:
                raise _bad("AuthorizationHeaderMalformed",
                           f"the authorization header is malformed near {item.strip()!r}")
            fields[name] = value.strip()
        missing = [f for f in ("Credential", "SignedHeaders", "Signature") if f not in fields]
        if missing:
            raise _bad("AuthorizationHeaderMalformed",
                       f"the authorization header is missing {', '.join(missing)}")
        access_key, date, region = self._check_credential(fields["Credential"],
                                                          "AuthorizationHeaderMalformed")
        amz = header_values(headers, "x-amz-date")
        if amz:
            amz_date = amz[0].strip()
            when = _amz_date_seconds(amz_date, "x-amz-date")
        else:
            raw_date = header_values(headers, "date")
            try:
                date_time = parsedate_to_datetime(raw_date[0]).astimezone(UTC)
            except (IndexError, TypeError, ValueError):
                raise _bad("AccessDenied", "AWS authentication requires a valid Date or "
                           "x-amz-date header", 403) from None
            amz_date = date_time.strftime(AMZ_DATE_FMT)
            when = date_time.timestamp()
        if amz_date[:8] != date:
            raise _bad("AuthorizationHeaderMalformed", f"invalid credential date {date!r}: it "
                       f"is not the date of the request ({amz_date[:8]})")
        if abs(now - when) > self._max_skew_seconds:
            raise _bad("RequestTimeTooSkewed", "The difference between the request time and the "
                       "server's time is too large.", 403)
        sha = header_values(headers, "x-amz-content-sha256")
        if not sha:
            raise _bad("InvalidRequest",
                       "Missing required header for this request: x-amz-content-sha256")
        mode, content_sha = parse_payload_mode(sha[0].strip())
        signed = fields["SignedHeaders"].split(";")
        if "host" not in signed:
            raise _bad("AuthorizationHeaderMalformed", "SignedHeaders must include host")
        signature = fields["Signature"]
        return self._check_signature(
            method, raw_path, canonical_query(raw_query), headers, signed, sha[0].strip(),
            access_key, date, region, amz_date, signature, mode, content_sha, presigned=False)

    # -- presigned URLs --------------------------------------------------------------------

    def _verify_presigned(self, method: str, raw_path: str, raw_query: str,
                          params: dict[str, list[str]], headers: Mapping[str, str],
                          now: datetime) -> AuthContext:
        code = "AuthorizationQueryParametersError"

        def one(name: str) -> str:
            values = params.get(name)
            if not values or len(values) != 1:
                raise _bad(code, f"Query-string authentication version 4 requires the "
                           f"X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, "
                           f"X-Amz-SignedHeaders, and X-Amz-Expires parameters ({name} is "
                           "missing or repeated).")
            return values[0]

        if one("X-Amz-Algorithm") != ALGORITHM:
            raise _bad(code, f"X-Amz-Algorithm only supports \"{ALGORITHM}\"")
        access_key, date, region = self._check_credential(one("X-Amz-Credential"), code)
        amz_date = one("X-Amz-Date")
        try:
            when = parse_stamp(amz_date)
        except ValueError:
            raise _bad(code, "X-Amz-Date must be in the ISO8601 Long Format "
                       "\"yyyyMMdd'T'HHmmss'Z'\"") from None
        try:
            expires = int(one("X-Amz-Expires"))
        except ValueError:
            raise _bad(code, "X-Amz-Expires should be a number") from None
        if expires < 0:
            raise _bad(code, "X-Amz-Expires must be non-negative")
        if expires > MAX_PRESIGN_EXPIRES:
            raise _bad(code, "X-Amz-Expires must be less than a week (in seconds) that is "
                       "604800")
        if amz_date[:8] != date:
            raise _bad(code, f"invalid credential date {date!r}: it is not the date of "
                       f"X-Amz-Date ({amz_date[:8]})")
        if when - now > self._max_skew:
            raise _bad("AccessDenied", "Request is not valid yet", 403)
        if now > when + timedelta(seconds=expires):
            raise _bad("AccessDenied", "Request has expired", 403)
        signed = one("X-Amz-SignedHeaders").split(";")
        if "host" not in signed:
            raise _bad(code, "X-Amz-SignedHeaders must include host")
        hashed = params.get("X-Amz-Content-Sha256", ["UNSIGNED-PAYLOAD"])[0]
        mode, content_sha = parse_payload_mode(hashed)
        return self._check_signature(
            method, raw_path, canonical_query(raw_query, drop="X-Amz-Signature"), headers,
            signed, hashed, access_key, date, region, amz_date, one("X-Amz-Signature"), mode,
            content_sha, presigned=True)

    # -- shared ----------------------------------------------------------------------------

    def _check_credential(self, credential: str, code: str) -> tuple[str, str, str]:
        known = self._scopes.get(credential)
        if known is not None:
            return known
        checked = self._check_new_credential(credential, code)
        if len(self._scopes) > 256:
            self._scopes.clear()
        self._scopes[credential] = checked
        return checked

    def _check_new_credential(self, credential: str, code: str) -> tuple[str, str, str]:
        parts = credential.split("/")
        if len(parts) != 5 or not parts[0]:
            raise _bad(code, f"the credential {credential!r} is malformed; expecting "
                       "\"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\"")
        access_key, date, region, service, terminator = parts
        if not (len(date) == 8 and is_decimal(date)):
            raise _bad(code, f"invalid credential date {date!r}; expecting YYYYMMDD")
        if service != "s3":
            raise _bad(code, f"incorrect service {service!r}; this endpoint belongs to 's3'")
        if terminator != "aws4_request":
            raise _bad(code, f"incorrect terminal {terminator!r}; expecting 'aws4_request'")
        if not region or (self._region is not None and region != self._region):
            raise _bad(code, f"the region {region!r} is wrong; expecting "
                       f"{self._region or 'a region'!r}")
        if access_key not in self._credentials:
            raise _bad("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist "
                       "in our records.", 403)
        return access_key, date, region

    def _check_signature(self, method: str, raw_path: str, cquery: str,
                         headers: Mapping[str, str], signed: list[str], hashed_payload: str,
                         access_key: str, date: str, region: str, amz_date: str,
                         given: str, mode: PayloadMode, content_sha: str | None, *,
                         presigned: bool) -> AuthContext:
        scope = credential_scope(date, region)
        key = self._signing_key(access_key, date, region)
        cheaders = signed_header_values(headers, signed)
        signed_names = ";".join(signed)
        path = raw_path or "/"
        given_bytes = given.encode("utf-8", "surrogateescape")

        def matches(cpath: str) -> bool:
            creq = canonical_request(method.upper(), cpath, cquery, cheaders, signed_names,
                                     hashed_payload)
            expected = signature(key, string_to_sign(amz_date, scope, creq))
            # bytes: compare_digest raises TypeError on str with non-ASCII characters
            return hmac.compare_digest(expected.encode(), given_bytes)

        # the path as sent; the normalised one (reserved characters encoded) only if that fails
        ok = matches(path)
        if not ok:
            normalised = uri_encode(unquote(path), keep_slash=True)
            ok = normalised != path and matches(normalised)
        if not ok or not _SIG_RE.match(given):
            raise _bad("SignatureDoesNotMatch", "The request signature we calculated does not "
                       "match the signature you provided. Check your key and signing method.",
                       403)
        return AuthContext(access_key=access_key, region=region, date=date, amz_date=amz_date,
                           scope=scope, signing_key=key, seed_signature=given,
                           payload_mode=mode, content_sha256=content_sha, presigned=presigned)
