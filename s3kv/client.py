"""Async client for the gateway's native API: the piece an inference connector embeds.

    async with S3KVClient("http://127.0.0.1:9470", token="ACCESS:SECRET") as kv:
        await kv.put_many("llama", {"h1": b"...", "h2": b"..."})
        n = await kv.lookup_prefix("llama", ["h1", "h2", "h3"])   # -> 2
        blocks = await kv.get_many("llama", ["h1", "h2"])          # -> [bytes | None, ...]

Errors from the gateway become s3kv.errors: Backpressure (503 SlowDown, with retry_after; from
put_many also ``stored``, the leading blocks that were stored, so a retry sends the rest),
NamespaceNotFound, TooLarge, InvalidInput, or RequestError for the rest.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import aiohttp

from s3kv.errors import (
    BackendUnavailable,
    Backpressure,
    InvalidInput,
    NamespaceNotFound,
    RequestError,
    TooLarge,
)
from s3kv.frames import FRAMES, STORED_HEADER, encode_frames, read_records


class S3KVClient:
    def __init__(self, endpoint: str, *, token: str | None = None, timeout: float = 60.0,
                 connections: int = 16) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> S3KVClient:
        self._session = aiohttp.ClientSession(
            timeout=self._timeout, headers=self._headers,
            connector=aiohttp.TCPConnector(limit=self._connections))
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @asynccontextmanager
    async def _open(self, method: str, path: str, *, data: bytes | None = None,
                    json_body: Any = None, headers: Mapping[str, str] | None = None
                    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A successful response, its body not read yet; errors become s3kv.errors."""
        if self._session is None:
            raise RuntimeError("use `async with S3KVClient(...)`")
        try:
            async with self._session.request(method, self.endpoint + path, data=data,
                                             json=json_body, headers=headers) as resp:
                if resp.status >= 400:
                    body = await resp.read()
                    raise _error(resp.status, body, resp.headers)
                yield resp
        except aiohttp.ClientError as exc:
            raise BackendUnavailable(f"gateway {self.endpoint} unreachable: {exc}") from exc

    async def _request(self, method: str, path: str, *, data: bytes | None = None,
                       json_body: Any = None, headers: Mapping[str, str] | None = None
                       ) -> bytes:
        async with self._open(method, path, data=data, json_body=json_body,
                              headers=headers) as resp:
            return await resp.read()

    async def lookup(self, namespace: str, keys: Sequence[str]) -> tuple[int, list[bool]]:
        """(number of leading keys present, presence of each key)."""
        body = await self._request("POST", f"/v1/{namespace}/lookup",
                                   json_body={"keys": list(keys)})
        doc = json.loads(body)
        return int(doc["prefix"]), [bool(p) for p in doc["present"]]

    async def lookup_prefix(self, namespace: str, keys: Sequence[str]) -> int:
        return (await self.lookup(namespace, keys))[0]

    async def get_many(self, namespace: str, keys: Sequence[str]) -> list[bytes | None]:
        """The blocks (None for a miss), in the order of ``keys``."""
        return [block async for _, block in self.iter_many(namespace, keys)]

    async def iter_many(self, namespace: str, keys: Sequence[str]
                        ) -> AsyncGenerator[tuple[str, bytes | None], None]:
        """(key, block or None) in the order of ``keys``, each as soon as it arrives: the
        gateway streams a batch get, so a connector can place the first blocks of a chain
        while later ones are still on their way, holding one block at a time."""
        want = list(keys)
        async with self._open("POST", f"/v1/{namespace}/batch-get",
                              json_body={"keys": want}) as resp:
            try:
                async for key, length in read_records(resp.content, want):
                    yield key, (None if length is None
                                else await resp.content.readexactly(length))
            except (asyncio.IncompleteReadError, ValueError) as exc:
                raise RequestError("MalformedFrames", f"bad batch-get stream from "
                                   f"{self.endpoint}: {exc}", 502) from exc

    async def put_many(self, namespace: str, blocks: Mapping[str, bytes] | Sequence[
            tuple[str, bytes]], *, durable: bool = False) -> int:
        items = list(blocks.items()) if isinstance(blocks, Mapping) else list(blocks)
        headers = {"Content-Type": FRAMES}
        if durable:
            headers["x-s3kv-durability"] = "sealed"
        body = await self._request("POST", f"/v1/{namespace}/batch-put",
                                   data=b"".join(encode_frames(items)), headers=headers)
        return int(json.loads(body)["stored"])

    async def flush(self) -> None:
        await self._request("POST", "/v1/flush")

    async def stats(self) -> dict[str, float]:
        doc: dict[str, float] = json.loads(await self._request("GET", "/v1/stats"))
        return doc


def _error(status: int, body: bytes, headers: Mapping[str, str]) -> Exception:
    try:
        doc = json.loads(body)
        code, message = str(doc.get("error", "")), str(doc.get("message", ""))
    except ValueError:
        code, message = "", body[:200].decode(errors="replace")
    if code == "SlowDown" or status == 503:
        return Backpressure(message or "gateway busy", float(headers.get("Retry-After") or 1),
                            int(headers.get(STORED_HEADER) or 0))
    if code == "NoSuchBucket":
        return NamespaceNotFound(message)
    if code == "EntityTooLarge":
        return TooLarge(message)
    if status == 400 and code == "InvalidArgument":
        return InvalidInput(message)
    return RequestError(code or "HTTPError", message, status)
