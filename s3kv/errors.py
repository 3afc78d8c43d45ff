"""The one error hierarchy of s3kv.

Every layer raises these; each boundary translates them once: the S3 backend turns botocore
errors into them, the gateway turns them into S3 XML errors, the CLI into a message and an exit
code. Nothing else is caught and re-labelled along the way.
"""

from __future__ import annotations


class S3KVError(Exception):
    """Base of every error s3kv raises on purpose."""

    #: a short machine-readable code, close to S3's vocabulary
    code: str = "InternalError"


class ConfigError(S3KVError):
    """A setting, flag or URL is invalid. The message says which and what to do."""

    code = "InvalidArgument"


class InvalidInput(S3KVError):
    """A caller passed a value the store cannot accept (bad key, bad namespace, bad range)."""

    code = "InvalidArgument"


class TooLarge(InvalidInput):
    """A block is larger than `max_block_size`."""

    code = "EntityTooLarge"


class InvalidRange(InvalidInput):
    """A byte range does not overlap the block."""

    code = "InvalidRange"


class NotFound(S3KVError):
    code = "NoSuchKey"


class NamespaceNotFound(NotFound):
    code = "NoSuchBucket"


class NamespaceExists(S3KVError):
    code = "BucketAlreadyOwnedByYou"


class NamespaceNotEmpty(S3KVError):
    code = "BucketNotEmpty"


class Backpressure(S3KVError):
    """The store cannot take more writes now; retry after `retry_after` seconds (503 SlowDown).

    ``stored``: for a batch put, how many of its leading blocks were stored before the store
    pushed back (they stay stored); a retry sends only the rest (header ``x-s3kv-stored``).
    """

    code = "SlowDown"

    def __init__(self, message: str, retry_after: float = 1.0, stored: int = 0) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.stored = stored


class IntegrityError(S3KVError):
    """Stored bytes do not match their checksum, or a segment/manifest is malformed."""

    code = "IntegrityError"


class BackendError(S3KVError):
    """The object backend failed. `transient` errors are retried by the one retry policy."""

    code = "BackendError"

    def __init__(self, message: str, *, transient: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status


class BackendUnavailable(BackendError):
    """The backend cannot be reached (connection refused, timeouts, 5xx after retries)."""

    code = "ServiceUnavailable"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message, transient=True, status=status)


class BackendFull(BackendError):
    """The backend refused a write for lack of space (a bucket quota, a full cluster). Not
    transient: waiting frees nothing; the store evicts to make room (store/fullness.py)."""

    code = "ServiceUnavailable"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message, transient=False, status=status)


def full_in(exc: BaseException | None) -> BackendFull | None:
    """The BackendFull that ``exc`` is, or was raised from (a failed upload's later parts
    raise an error of their own from the first failure)."""
    for _ in range(8):
        if exc is None or isinstance(exc, BackendFull):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


class ObjectMissing(BackendError):
    """The backend has no object at that key (deleted by eviction or another replica)."""

    code = "NoSuchKey"

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False, status=404)


class RequestError(S3KVError):
    """A client request the gateway rejects, with its S3 error code and HTTP status.

    Raised by the gateway's request parsing and authentication (SigV4, chunked bodies, XML,
    headers); the gateway renders it as an S3 XML error document.
    """

    def __init__(self, code: str, message: str, status: int = 400,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.headers = headers or {}


class InvalidNamespace(InvalidInput):
    """A namespace (bucket) name breaks the naming rules."""

    code = "InvalidBucketName"


class TooManyNamespaces(InvalidInput):
    """Every namespace id the index can hold is taken (65,535 namespaces)."""

    code = "TooManyBuckets"
