"""The request headers a body reader looks at, parsed: sizes, Content-MD5, flexible checksums.

Raised here, before a byte of the body is read: InvalidArgument (a size that is not a
non-negative integer), InvalidRequest (contradictory or malformed checksum declarations),
NotImplemented (a checksum S3 defines that the gateway does not compute).
"""

from __future__ import annotations

import base64
import binascii

from s3kv.errors import RequestError
from s3kv.gateway.checksums import ALGORITHMS
from s3kv.wire.headers import HeaderValues, comma_list
from s3kv.wire.sigv4 import PayloadMode

#: checksums S3 defines that the gateway does not compute: refused wherever a request names
#: one, never accepted unchecked (that would fake the check the client asked for)
UNCHECKED = ("md5", "sha512", "xxhash3", "xxhash64", "xxhash128")


def _unchecked(algo: str) -> RequestError:
    return RequestError("NotImplemented", f"s3kv does not implement the {algo.upper()} "
                        "checksum; use CRC32, CRC32C, CRC64NVME, SHA1 or SHA256. Nothing was "
                        "stored.", 501)


def refuse_unchecked(headers: HeaderValues) -> None:
    """501 for a checksum of :data:`UNCHECKED` named by a request: as an ``x-amz-checksum-*``
    header, an ``x-amz-trailer`` or the ``x-amz-sdk-checksum-algorithm``."""
    named = [a for a in UNCHECKED if headers.get(f"x-amz-checksum-{a}")]
    named += [t.lower().removeprefix("x-amz-checksum-")
              for t in comma_list(headers, "x-amz-trailer")]
    named += [v.strip().lower() for v in headers.get("x-amz-sdk-checksum-algorithm", [])[:1]]
    for algo in named:
        if algo in UNCHECKED:
            raise _unchecked(algo)


def checksum_algorithm(raw: str | None) -> str | None:
    """``x-amz-checksum-algorithm`` (a CreateMultipartUpload's, a CopyObject's) in lower case,
    None if absent; NotImplemented for one of :data:`UNCHECKED`, InvalidRequest for one the
    gateway does not know."""
    if raw is None:
        return None
    algo = raw.strip().lower()
    if algo in UNCHECKED:
        raise _unchecked(algo)
    if algo not in ALGORITHMS:
        raise RequestError("InvalidRequest", f"Checksum algorithm {raw!r} is not supported: use "
                           "CRC32, CRC32C, CRC64NVME, SHA1 or SHA256.")
    return algo


def int_header(headers: HeaderValues, name: str) -> int | None:
    """The first value of header ``name`` as a size (None: absent)."""
    values = headers.get(name)
    if not values:
        return None
    try:
        value = int(values[0].strip())
    except ValueError:
        value = -1
    if value < 0:
        raise RequestError("InvalidArgument", f"{name} must be a non-negative integer")
    return value


def b64(value: str, size: int) -> bytes | None:
    """``value`` decoded from base64 if it is ``size`` bytes (a digest), else None."""
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == size else None


def checksum_headers(headers: HeaderValues,
                     mode: PayloadMode) -> tuple[str | None, str | None]:
    """The flexible checksum a body declares: (algorithm, its header value; None when it
    comes in a trailer), or (None, None); InvalidRequest for a contradictory or malformed
    declaration."""
    refuse_unchecked(headers)
    found = [(a, v) for a in ALGORITHMS if (v := headers.get(f"x-amz-checksum-{a}"))]
    trailer_names = [t.lower() for t in comma_list(headers, "x-amz-trailer")]
    if trailer_names and not mode.trailer:
        raise RequestError("InvalidRequest", "x-amz-trailer needs a *-TRAILER "
                           "x-amz-content-sha256")
    trailer_algos = []
    for name in trailer_names:
        trailer_algo = name.removeprefix("x-amz-checksum-")
        if trailer_algo == name or trailer_algo not in ALGORITHMS:
            raise RequestError("InvalidRequest", f"unsupported trailer {name!r}: only "
                               "x-amz-checksum-* trailers are accepted")
        trailer_algos.append(trailer_algo)
    if len(found) + len(trailer_algos) > 1:
        raise RequestError("InvalidRequest", "Expecting a single x-amz-checksum- header. "
                           "Multiple checksum Types are not allowed.")
    sdk = headers.get("x-amz-sdk-checksum-algorithm")
    algo: str | None = found[0][0] if found else (trailer_algos[0] if trailer_algos
                                                  else None)
    if sdk and sdk[0].strip().lower() != algo:
        raise RequestError("InvalidRequest", "x-amz-sdk-checksum-algorithm specified, but "
                           "no corresponding x-amz-checksum-* or x-amz-trailer headers "
                           "were found.")
    if not found:
        return algo, None
    value = found[0][1][0].strip()
    if b64(value, ALGORITHMS[found[0][0]][1]) is None:
        raise RequestError("InvalidRequest",
                           f"Value for x-amz-checksum-{found[0][0]} header is invalid.")
    return algo, value
