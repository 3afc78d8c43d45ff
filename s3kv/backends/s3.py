"""S3 backend (MinIO or any S3 endpoint) on aiobotocore.

Several endpoints (MinIO nodes) are used round-robin, each with a bounded connection pool.
botocore's own retries are off: the one RetryPolicy of s3kv retries transient errors (5xx,
SlowDown, connection failures) with backoff, nothing else. botocore errors are translated into
s3kv.errors here and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from aiobotocore.session import get_session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from botocore.httpsession import get_cert_path

from s3kv.backends.base import ObjectInfo, Pieces, Sink, UploadInfo, feed_whole_range
from s3kv.backends.ranged import RangedReader
from s3kv.config import READ_STALL
from s3kv.errors import BackendError, BackendFull, BackendUnavailable, ObjectMissing
from s3kv.wire.body import SLICE, SlicedBody, joined, pieces_of, size_of
from s3kv.wire.sigv4 import Credentials

T = TypeVar("T")

_MISSING_CODES = {"NoSuchKey", "NoSuchUpload", "404", "NotFound"}
_TRANSIENT_CODES = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout",
                    "XMinioServerNotInitialized"}
#: the server is out of room for this bucket: Ceph RGW's quota, MinIO's full drives and bucket
#: quota, HTTP 507
_FULL_CODES = {"QuotaExceeded", "XMinioStorageFull", "XMinioAdminBucketQuotaExceeded",
               "InsufficientStorage"}


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str
    endpoints: tuple[str, ...]
    region: str = "us-east-1"


def translate(exc: BaseException, what: str) -> BackendError:
    """Map a botocore/aiohttp/timeout exception onto the s3kv error hierarchy."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        msg = f"{what}: {code or status} {err.get('Message', '')}".strip()
        if code in _MISSING_CODES or (status == 404 and code != "NoSuchBucket"):
            return ObjectMissing(msg)
        if code in _FULL_CODES or status == 507:
            return BackendFull(msg, status=status)
        if status >= 500 or code in _TRANSIENT_CODES or status == 429:
            return BackendUnavailable(msg, status=status)
        return BackendError(msg, transient=False, status=status)
    if isinstance(exc, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError,
                        aiohttp.ClientError, asyncio.TimeoutError, TimeoutError, OSError)):
        return BackendUnavailable(f"{what}: {type(exc).__name__}: {exc}")
    if isinstance(exc, NoCredentialsError):  # not transient: no retry finds keys
        return BackendError(f"{what}: no credentials for the S3 backend: set "
                            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)")
    if isinstance(exc, BotoCoreError):
        return BackendUnavailable(f"{what}: {type(exc).__name__}: {exc}")
    return BackendError(f"{what}: {type(exc).__name__}: {exc}")


def _body(data: Pieces) -> bytes | SlicedBody:
    """A request body: large ones go out in slices of the caller's buffers (no copies)."""
    if size_of(data) > SLICE:
        return SlicedBody(pieces_of(data))
    one = joined(data)
    return one if isinstance(one, bytes) else bytes(one)


def client_config(max_connections: int = 32, connect_timeout: float = 3.0,
                  timeout: float = 30.0) -> Config:
    """How the backend's botocore clients talk to S3 (also what a benchmark that stands in for
    the backend uses, so it asks the server for the same work)."""
    return Config(
        max_pool_connections=max_connections,
        connect_timeout=connect_timeout,
        read_timeout=timeout,
        retries={"max_attempts": 1, "mode": "standard"},
        signature_version="s3v4",
        # Block integrity is the store's own checksum, verified on every read, so the
        # payload is not SHA-256-signed nor CRC'd a second time (1.7 GB/s per core).
        s3={"addressing_style": "path", "payload_signing_enabled": False},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )


class S3Backend:
    def __init__(self, location: S3Location, *, max_connections: int = 32,
                 timeout: float = 30.0, connect_timeout: float = 3.0,
                 fast_reads: bool = True, read_stall: float = READ_STALL) -> None:
        """``read_stall``: seconds a ranged read may go without a byte (RangedReader)."""
        self.loc = location
        self._read_stall = read_stall
        self._fast_reads = fast_reads
        self._ranged: RangedReader | None = None
        self.description = (f"s3://{location.bucket}/{location.prefix} @ "
                            f"{','.join(location.endpoints)}")
        self._timeout = timeout
        self._config = client_config(max_connections, connect_timeout, timeout)
        self._stack = AsyncExitStack()
        self._clients: list[Any] = []
        self._rr: itertools.cycle[int] | None = None

    async def open(self) -> S3Backend:
        session = get_session()
        for endpoint in self.loc.endpoints:
            client = await self._stack.enter_async_context(session.create_client(
                "s3", endpoint_url=endpoint, region_name=self.loc.region, config=self._config))
            self._clients.append(client)
        self._rr = itertools.cycle(range(len(self._clients)))
        chain = await session.get_credentials() if self._fast_reads else None
        if chain is not None:  # None: anonymous access, ranged reads stay with botocore
            region = self.loc.region

            async def current() -> Credentials:
                frozen = await chain.get_frozen_credentials()
                return Credentials(frozen.access_key, frozen.secret_key, frozen.token or "",
                                   region)

            # TLS trusts what botocore trusts: AWS_CA_BUNDLE / a profile's ca_bundle, else
            # botocore's own bundle
            ca_file = session.get_config_variable("ca_bundle") or get_cert_path(True)
            self._ranged = RangedReader(self.loc.bucket, current, str(ca_file),
                                        stall=self._read_stall)
        return self

    def _client(self) -> Any:
        assert self._rr is not None, "S3Backend.open() was not awaited"
        return self._clients[next(self._rr)]

    async def _call(self, what: str, fn: Callable[[Any], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(self._timeout):
                return await fn(self._client())
        except BackendError:
            raise
        except Exception as exc:
            raise translate(exc, what) from exc

    # ---- objects ------------------------------------------------------------------------
    async def put_object(self, key: str, data: Pieces) -> None:
        await self._call(f"PUT {key}", lambda c: c.put_object(
            Bucket=self.loc.bucket, Key=key, Body=_body(data)))

    async def _fast_get(self, what: str, call: Callable[[str], Awaitable[T]]) -> T:
        """A ranged GET on the botocore-free path, on the next endpoint, within the timeout."""
        assert self._rr is not None
        endpoint = self.loc.endpoints[next(self._rr)]
        try:
            async with asyncio.timeout(self._timeout):
                return await call(endpoint)
        except TimeoutError as exc:
            raise translate(exc, what) from exc

    async def get_range(self, key: str, start: int, length: int) -> bytes | bytearray:
        if length <= 0:
            return b""
        ranged = self._ranged
        if ranged is not None:
            return await self._fast_get(f"GET {key} [{start}+{length}]",
                                        lambda ep: ranged.read(ep, key, start, length))

        async def op(c: Any) -> bytes:
            resp = await c.get_object(Bucket=self.loc.bucket, Key=key,
                                      Range=f"bytes={start}-{start + length - 1}")
            async with resp["Body"] as body:
                data: bytes = await body.read()
                return data

        return await self._call(f"GET {key} [{start}+{length}]", op)

    async def stream_range(self, key: str, start: int, length: int, sink: Sink) -> int:
        ranged = self._ranged
        if ranged is None or length <= 0:  # botocore: the whole range at once
            return await feed_whole_range(self, key, start, length, sink)
        return await self._fast_get(f"GET {key} [{start}+{length}]",
                                    lambda ep: ranged.stream(ep, key, start, length, sink))

    async def presign_get(self, key: str, expires: int) -> str | None:
        """A URL a client can GET ``key`` with itself (Presigner); None with anonymous access
        (nothing to sign with) or with the fast reads off."""
        ranged = self._ranged
        if ranged is None:
            return None
        assert self._rr is not None
        return await ranged.presign(self.loc.endpoints[next(self._rr)], key, expires)

    async def get_object(self, key: str) -> bytes:
        async def op(c: Any) -> bytes:
            resp = await c.get_object(Bucket=self.loc.bucket, Key=key)
            async with resp["Body"] as body:
                data: bytes = await body.read()
                return data

        return await self._call(f"GET {key}", op)

    async def head_object(self, key: str) -> int:
        resp = await self._call(f"HEAD {key}", lambda c: c.head_object(
            Bucket=self.loc.bucket, Key=key))
        return int(resp["ContentLength"])

    async def list_objects(self, prefix: str) -> list[ObjectInfo]:
        async def op(c: Any) -> list[ObjectInfo]:
            out: list[ObjectInfo] = []
            paginator = c.get_paginator("list_objects_v2")
            async for page in paginator.paginate(Bucket=self.loc.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    out.append(ObjectInfo(item["Key"], int(item["Size"]),
                                          item["LastModified"].timestamp()))
            return out

        return await self._call(f"LIST {prefix}", op)

    async def delete_objects(self, keys: Sequence[str]) -> None:
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i:i + 1000]]

            def op(c: Any, b: list[dict[str, str]] = batch) -> Awaitable[Any]:
                return c.delete_objects(Bucket=self.loc.bucket,  # type: ignore[no-any-return]
                                        Delete={"Objects": b, "Quiet": True})

            resp = await self._call(f"DELETE {len(batch)} objects", op)
            errors = [e for e in resp.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                raise BackendError(f"DELETE failed for {len(errors)} objects: {errors[0]}",
                                   transient=True)

    # ---- multipart ----------------------------------------------------------------------
    async def create_multipart(self, key: str, part_size: int) -> str:
        resp = await self._call(f"CREATE-MULTIPART {key}", lambda c: c.create_multipart_upload(
            Bucket=self.loc.bucket, Key=key))
        return str(resp["UploadId"])

    async def upload_part(self, key: str, upload_id: str, part_number: int, data: Pieces) -> str:
        resp = await self._call(f"UPLOAD-PART {key}#{part_number}", lambda c: c.upload_part(
            Bucket=self.loc.bucket, Key=key, UploadId=upload_id, PartNumber=part_number,
            Body=_body(data)))
        return str(resp["ETag"])

    async def complete_multipart(self, key: str, upload_id: str,
                                 parts: Sequence[tuple[int, str]]) -> None:
        await self._call(f"COMPLETE-MULTIPART {key}", lambda c: c.complete_multipart_upload(
            Bucket=self.loc.bucket, Key=key, UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in parts]}))

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        with contextlib.suppress(ObjectMissing):  # already gone
            await self._call(f"ABORT-MULTIPART {key}", lambda c: c.abort_multipart_upload(
                Bucket=self.loc.bucket, Key=key, UploadId=upload_id))

    async def list_multipart_uploads(self, prefix: str) -> list[UploadInfo]:
        async def op(c: Any) -> list[UploadInfo]:
            out: list[UploadInfo] = []
            paginator = c.get_paginator("list_multipart_uploads")
            async for page in paginator.paginate(Bucket=self.loc.bucket, Prefix=prefix):
                for up in page.get("Uploads", []):
                    out.append(UploadInfo(up["Key"], up["UploadId"],
                                          up["Initiated"].timestamp()))
            return out

        return await self._call(f"LIST-UPLOADS {prefix}", op)

    async def check(self) -> None:
        await self._call(f"HEAD-BUCKET {self.loc.bucket}", lambda c: c.head_bucket(
            Bucket=self.loc.bucket))

    async def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (convenience for local set-ups and tests)."""
        try:
            await self.check()
        except BackendError as exc:
            if exc.status != 404:
                raise
            await self._call(f"CREATE-BUCKET {self.loc.bucket}", lambda c: c.create_bucket(
                Bucket=self.loc.bucket))

    async def close(self) -> None:
        if self._ranged is not None:
            self._ranged.close()
            self._ranged = None
        await self._stack.aclose()
        self._clients.clear()
