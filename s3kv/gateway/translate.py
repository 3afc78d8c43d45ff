"""The store's errors as S3 errors: one translation, at the gateway's boundary (the request
handlers' errors, and the per-key errors of a DeleteObjects result)."""

from __future__ import annotations

from s3kv.errors import (
    BackendError,
    Backpressure,
    IntegrityError,
    InvalidInput,
    InvalidNamespace,
    InvalidRange,
    NamespaceExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    NotFound,
    RequestError,
    S3KVError,
    TooLarge,
    TooManyNamespaces,
)
from s3kv.frames import STORED_HEADER

# store errors -> (HTTP status, S3 code); order matters: subclasses first
_STATUS: list[tuple[type[S3KVError], int, str]] = [
    (NamespaceNotFound, 404, "NoSuchBucket"),
    (NotFound, 404, "NoSuchKey"),
    (NamespaceExists, 409, "BucketAlreadyOwnedByYou"),
    (NamespaceNotEmpty, 409, "BucketNotEmpty"),
    (InvalidNamespace, 400, "InvalidBucketName"),
    (TooManyNamespaces, 400, "TooManyBuckets"),
    (TooLarge, 400, "EntityTooLarge"),
    (InvalidRange, 416, "InvalidRange"),
    (InvalidInput, 400, "InvalidArgument"),
    (Backpressure, 503, "SlowDown"),
    (BackendError, 503, "ServiceUnavailable"),
    (IntegrityError, 503, "ServiceUnavailable"),
]


def to_request_error(exc: S3KVError) -> RequestError:
    if isinstance(exc, RequestError):
        return exc
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            headers = {}
            if status == 503:
                retry = exc.retry_after if isinstance(exc, Backpressure) else 1.0
                headers["Retry-After"] = str(max(1, round(retry)))
            if isinstance(exc, Backpressure) and exc.stored:
                headers[STORED_HEADER] = str(exc.stored)
            return RequestError(code, str(exc), status, headers)
    return RequestError("InternalError", str(exc), 500)


def unread(still_indexed: bool) -> RequestError:
    """An object the index held whose read came back empty-handed (the store answers a miss):
    ``404 NoSuchKey`` once the key has left the index (evicted, found corrupt, its segment gone),
    ``503 ServiceUnavailable`` with Retry-After while it is still there (the backend failed or
    stalled: the object exists, retry). ``still_indexed``: whether the store still has it."""
    if still_indexed:
        return to_request_error(BackendError(
            "the object could not be read from the storage backend now; retry"))
    return RequestError("NoSuchKey", "The specified key does not exist.", 404)
