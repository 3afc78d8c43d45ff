"""The S3 clients a benchmark side (:class:`benchmarks.harness.S3Side`) drives, behind one small
interface (:class:`BlockClient`: create a bucket, PUT a block, GET a block whole):

- ``aiobotocore`` (:class:`BotoBlocks`): botocore's SigV4 client, path-style, ``concurrency``
  pooled connections; ``payload`` ``signed`` (SHA-256 payload signature and CRC32 checksum,
  botocore's default over plain HTTP) or ``unsigned`` (UNSIGNED-PAYLOAD, no checksum);
- ``warp`` (:class:`WarpBlocks`): the load generator's own client (:class:`warp.s3.S3Client`,
  what ``s3kv bench put|get`` drives): raw aiohttp, its own SigV4 signer, always
  UNSIGNED-PAYLOAD; a PUT body goes out as views of the block (:class:`SlicedBody`) with a
  Content-Length, a GET reads the whole body. It costs the client's core far less CPU per byte
  than botocore does.

Both raise :class:`SlowDown` (with the Retry-After the server asked for) on a PUT answered 503,
and an exception on any other failure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

import aiohttp
from aiobotocore.session import get_session
from botocore.config import Config
from botocore.exceptions import ClientError

from s3kv.wire.sigv4 import Credentials
from warp.opresult import OpResult
from warp.payload import PayloadSource
from warp.s3 import S3Client

#: --client: which S3 client drives both sides
CLIENTS = ("aiobotocore", "warp")
#: --payload (aiobotocore only): unsigned sends UNSIGNED-PAYLOAD and no CRC (as Warp's
#: --disable-sha256-payload and the gateway's own backend client do), so client hashing stops
#: dominating a 2-core machine; signed is botocore's own behaviour over plain HTTP
PAYLOAD_SIGNING = {"signed": True, "unsigned": False}


class SlowDown(Exception):
    """A PUT answered 503 SlowDown: try again after ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"503 SlowDown, retry after {retry_after} s")
        self.retry_after = retry_after


class BlockClient(Protocol):
    """What a benchmark side asks of its S3 client."""

    async def create_bucket(self, bucket: str) -> None: ...

    async def put(self, bucket: str, key: str, body: bytes) -> None:
        """PUT ``body`` as one object; :class:`SlowDown` on a 503."""

    async def get(self, bucket: str, key: str) -> bytes:
        """The object's whole body."""


def client_config(concurrency: int, payload: str = "signed") -> Config:
    signed = PAYLOAD_SIGNING[payload]
    return Config(signature_version="s3v4",
                  s3={"addressing_style": "path", "payload_signing_enabled": signed},
                  request_checksum_calculation="when_supported" if signed else "when_required",
                  retries={"max_attempts": 1, "mode": "standard"},
                  max_pool_connections=max(concurrency, 10), tcp_keepalive=True)


class BotoBlocks:
    """:class:`BlockClient` on an aiobotocore S3 client."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def create_bucket(self, bucket: str) -> None:
        await self.client.create_bucket(Bucket=bucket)

    async def put(self, bucket: str, key: str, body: bytes) -> None:
        try:
            await self.client.put_object(Bucket=bucket, Key=key, Body=body)
        except ClientError as exc:
            meta = exc.response.get("ResponseMetadata", {})
            if meta.get("HTTPStatusCode") != 503:
                raise
            raise SlowDown(float(meta.get("HTTPHeaders", {}).get("retry-after", "1"))) from exc

    async def get(self, bucket: str, key: str) -> bytes:
        resp = await self.client.get_object(Bucket=bucket, Key=key)
        async with resp["Body"] as body:
            data: bytes = await body.read()
        return data


class WarpBlocks:
    """:class:`BlockClient` on warp's :class:`S3Client` (no retries of its own: a 503 to a PUT
    is :class:`SlowDown`, any other failure a :class:`RuntimeError` with the server's code)."""

    def __init__(self, client: S3Client) -> None:
        self.client = client

    @staticmethod
    def _check(what: str, result: OpResult) -> None:
        if result.error:
            raise RuntimeError(f"{what}: {result.error}")

    async def create_bucket(self, bucket: str) -> None:
        self._check(f"create bucket {bucket}", await self.client.create_bucket(bucket))

    async def put(self, bucket: str, key: str, body: bytes) -> None:
        r = await self.client.put_views(bucket, key, [body])
        if r.status == 503:
            raise SlowDown(r.retry_after)
        self._check(f"PUT {bucket}/{key}", r)

    async def get(self, bucket: str, key: str) -> bytes:
        got: list[bytes] = []

        async def read(resp: aiohttp.ClientResponse, result: OpResult) -> str:
            got.append(await resp.read())
            return ""

        self._check(f"GET {bucket}/{key}", await self.client.request("GET", bucket, key,
                                                                     reader=read, ok=(200,)))
        return got[0]


def warp_credentials(kwargs: Mapping[str, Any]) -> Credentials:
    """The credentials in ``create_client`` arguments (else the environment's, as botocore)."""
    region = kwargs.get("region_name") or "us-east-1"
    access, secret = kwargs.get("aws_access_key_id"), kwargs.get("aws_secret_access_key")
    if access is None or secret is None:
        return Credentials.from_environment(region)
    return Credentials(access, secret, region=region)


@asynccontextmanager
async def open_client(kind: str, kwargs: Mapping[str, Any], *, payload: str = "signed",
                      concurrency: int = 8) -> AsyncIterator[BlockClient]:
    """A :class:`BlockClient` of ``kind`` (one of :data:`CLIENTS`) for the endpoint and
    credentials in ``kwargs`` (``create_client``'s: ``endpoint_url``, ``region_name``,
    ``aws_access_key_id``, ``aws_secret_access_key``), with connections for ``concurrency``
    requests at once. ``payload`` is aiobotocore's; warp's client takes only ``unsigned``."""
    if kind == "aiobotocore":
        async with get_session().create_client(
                "s3", config=client_config(concurrency, payload), **kwargs) as boto:
            yield BotoBlocks(boto)
        return
    if kind != "warp":
        raise ValueError(f"unknown S3 client {kind!r}: one of {', '.join(CLIENTS)}")
    if PAYLOAD_SIGNING[payload]:
        raise ValueError("warp's S3 client always sends UNSIGNED-PAYLOAD (payload 'unsigned')")
    # S3Client's own payload buffer is unused (bodies are the caller's blocks): keep it small
    async with S3Client([kwargs["endpoint_url"]], warp_credentials(kwargs),
                        PayloadSource(0, base_size=1 << 16),
                        connections=max(concurrency, 10)) as warp:
        yield WarpBlocks(warp)
