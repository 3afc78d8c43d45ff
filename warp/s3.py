"""A small S3 client for load generation: SigV4 with UNSIGNED-PAYLOAD, no body copies.

Each call is one operation and returns an :class:`OpResult` (status, bytes, first byte, end,
error, retries): errors are data, never exceptions, so a benchmark keeps going and counts them.
Single PUTs and GETs, the hot path of a run, go through :mod:`s3kv.wire.fastget`'s lean
HTTP/1.1 client: PUT bodies are sent as memoryview slices of the shared payload buffer, GET
bodies received into reused per-connection buffers, hashed there and dropped, so memory does
not grow with object size. Everything else (multipart, listing, deletes) goes through aiohttp.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from s3kv.clock import now_ns
from s3kv.wire.body import Buffer, SlicedBody, size_of
from s3kv.wire.fastget import GetPool, ProtocolError
from s3kv.wire.sigv4 import UNSIGNED, Credentials, Signer, canonical_query, quote_path
from warp.opresult import OpResult, drop, error_text, failed, retry_after_seconds, xml_text
from warp.payload import Expected, Hasher, PayloadSource
from warp.records import VERIFY_PREFIX

#: statuses worth a retry (server busy or failing), as Warp's Go client retries them
TRANSIENT = frozenset({500, 502, 503, 504})
READ_BUFSIZE = 1 << 20


Body = bytes | SlicedBody | None
# reads a successful response's body into the result; returns an error text ("" when fine)
Reader = Callable[[aiohttp.ClientResponse, OpResult], Awaitable[str]]


async def _discard(resp: aiohttp.ClientResponse, result: OpResult) -> str:
    await resp.read()
    return ""


class S3Client:
    """One per client process; endpoints are used round-robin, one request at a time each."""

    def __init__(self, endpoints: Iterable[str], creds: Credentials, payload: PayloadSource, *,
                 connections: int, retries: int = 0, timeout: float = 0.0) -> None:
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._rr = itertools.cycle(self.endpoints)
        self._hosts = {e: urlsplit(e).netloc for e in self.endpoints}
        self.signer = Signer(creds)
        self.payload = payload
        self.retries = retries
        self.timeout = timeout
        self._gets = GetPool()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, limit_per_host=0,
                                           ttl_dns_cache=None),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30,
                                          sock_read=timeout or None),
            auto_decompress=False, read_bufsize=READ_BUFSIZE,
            skip_auto_headers=("User-Agent", "Accept-Encoding"))

    async def close(self) -> None:
        self._gets.close()
        await self._session.close()

    async def __aenter__(self) -> S3Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def next_endpoint(self) -> str:
        return next(self._rr)

    # ---- one signed request, with retries -------------------------------------------------
    async def request(self, method: str, bucket: str, key: str = "", *,
                      query: dict[str, str] | None = None, headers: dict[str, str] | None = None,
                      body: Callable[[], Body] | None = None, payload_hash: str = UNSIGNED,
                      reader: Reader = _discard, endpoint: str = "",
                      ok: tuple[int, ...] = (200, 204, 206)) -> OpResult:
        endpoint = endpoint or self.next_endpoint()
        path = quote_path(f"/{bucket}/{key}" if key else f"/{bucket}")
        qs = canonical_query(query or {})
        url = URL(f"{endpoint}{path}" + (f"?{qs}" if qs else ""), encoded=True)
        result = OpResult(endpoint=endpoint, start_ns=now_ns())
        attempt = 0
        while True:
            hdrs = self.signer.sign(method, self._hosts[endpoint], path, qs, dict(headers or {}),
                                    payload_hash)
            try:
                async with self._session.request(method, url, headers=hdrs,
                                                 data=body() if body else None) as resp:
                    result.first_byte_ns = now_ns()
                    result.status = resp.status
                    if resp.status in ok:
                        result.error = await reader(resp, result)
                    else:
                        result.error = error_text(resp.status, await resp.content.read(65536))
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                failed(result, exc)
            if not await self._again(result, attempt):
                break
            attempt += 1
        result.end_ns = now_ns()
        return result

    def _retry(self, result: OpResult, attempt: int) -> bool:
        return bool(result.error) and attempt < self.retries and (
            result.status == 0 or result.status in TRANSIENT)

    async def _again(self, result: OpResult, attempt: int) -> bool:
        """After attempt ``attempt``: whether to try again, after the backoff (counted)."""
        if not self._retry(result, attempt):
            return False
        result.retries = attempt + 1
        await asyncio.sleep(min(1.0, 0.05 * 2 ** (attempt + 1)))
        return True

    # ---- operations -----------------------------------------------------------------------
    async def create_bucket(self, bucket: str) -> OpResult:
        r = await self.request("PUT", bucket)
        if r.status == 409 and "BucketAlreadyOwnedByYou" in r.error:
            r.error = ""  # it exists and is ours
        return r

    async def put_object(self, bucket: str, key: str, variant: int, size: int,
                         endpoint: str = "") -> OpResult:
        r = await self.put_views(bucket, key, list(self.payload.slices(variant, 0, size)),
                                 endpoint=endpoint)
        r.size = size if not r.error else 0
        return r

    async def put_views(self, bucket: str, key: str, body: Sequence[Buffer], *,
                        endpoint: str = "") -> OpResult:
        """PUT one object whose body is these buffers, sent as they are over the lean client
        (:mod:`s3kv.wire.fastget`); a 503's Retry-After is kept in ``retry_after``."""
        endpoint = endpoint or self.next_endpoint()
        path = quote_path(f"/{bucket}/{key}")
        length = str(size_of(body))
        result = OpResult(endpoint=endpoint, start_ns=now_ns())

        async def once() -> None:
            headers = self.signer.sign("PUT", self._hosts[endpoint], path, "",
                                       {"Content-Length": length})
            resp = await self._gets.send("PUT", endpoint, path, headers, body, drop, frozenset())
            result.status, result.first_byte_ns = resp.status, resp.first_byte_ns
            result.error = "" if resp.status == 200 else error_text(resp.status, resp.error_body)
            if resp.status == 503:
                result.retry_after = retry_after_seconds(resp.headers.get("retry-after", ""))

        await self._lean(result, once)
        return result

    async def _lean(self, result: OpResult, once: Callable[[], Awaitable[None]]) -> None:
        """Run ``once`` (one exchange on the lean client, filling ``result``) under the
        timeout and the retry policy; an exchange that got no answer is status 0 with the
        exception as its error."""
        attempt = 0
        while True:
            try:
                async with asyncio.timeout(self.timeout or None):
                    await once()
            except (TimeoutError, OSError, ProtocolError) as exc:
                failed(result, exc)
            if not await self._again(result, attempt):
                break
            attempt += 1
        result.end_ns = now_ns()

    async def multipart_put(self, bucket: str, key: str, variant: int, size: int,
                            part_size: int, in_flight: int) -> OpResult:
        """Create, upload parts with ``in_flight`` at once, complete (abort on failure)."""
        endpoint = self.next_endpoint()
        start = now_ns()
        upload_id = ""

        async def read_id(resp: aiohttp.ClientResponse, res: OpResult) -> str:
            nonlocal upload_id
            m = re.search(rb"<UploadId>([^<]+)</UploadId>", await resp.read())
            upload_id = m.group(1).decode() if m else ""
            return "" if upload_id else "no UploadId in response"

        r = await self.request("POST", bucket, key, query={"uploads": ""}, reader=read_id,
                               endpoint=endpoint)
        if r.error:
            return r
        total = OpResult(endpoint=endpoint, start_ns=start, retries=r.retries)
        etags: dict[int, str] = {}
        gate = asyncio.Semaphore(in_flight)

        async def read_etag(resp: aiohttp.ClientResponse, res: OpResult) -> str:
            await resp.read()
            etag = resp.headers.get("ETag", "")
            res.keys.append(etag)
            return "" if etag else "no ETag in part response"

        async def part(number: int, offset: int, length: int) -> OpResult:
            def body() -> Body:
                return SlicedBody(self.payload.slices(variant, offset, length))

            async with gate:
                if total.error:
                    return OpResult(endpoint=endpoint, error="skipped")
                pr = await self.request(
                    "PUT", bucket, key, query={"partNumber": str(number), "uploadId": upload_id},
                    headers={"Content-Length": str(length)}, body=body, endpoint=endpoint,
                    reader=read_etag)
                if pr.error:
                    total.error = total.error or f"part {number}: {pr.error}"
                    total.status = total.status or pr.status
                return pr

        offsets = list(range(0, size, part_size))
        try:
            tasks = [part(i + 1, off, min(part_size, size - off)) for i, off in enumerate(offsets)]
            for i, pr in enumerate(await asyncio.gather(*tasks)):
                total.retries += pr.retries
                etags[i + 1] = pr.keys[0] if pr.keys else ""
            if not total.error:
                xml = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>"
                              for n, e in sorted(etags.items()))
                doc = f"<CompleteMultipartUpload>{xml}</CompleteMultipartUpload>".encode()
                cr = await self.request("POST", bucket, key, query={"uploadId": upload_id},
                                        body=lambda: doc, endpoint=endpoint,
                                        payload_hash=hashlib.sha256(doc).hexdigest(),
                                        reader=_complete_reader)
                total.retries += cr.retries
                total.status = cr.status
                total.error = cr.error
        except asyncio.CancelledError:
            await asyncio.wait_for(self._abort(bucket, key, upload_id, endpoint), 5)
            raise
        if total.error:
            await self._abort(bucket, key, upload_id, endpoint)
        else:
            total.size = size
        total.end_ns = now_ns()
        return total

    async def _abort(self, bucket: str, key: str, upload_id: str, endpoint: str) -> None:
        await self.request("DELETE", bucket, key, query={"uploadId": upload_id},
                           endpoint=endpoint)

    async def get_object(self, bucket: str, key: str, expected: Expected | None,
                         offset: int = 0, length: int = 0) -> OpResult:
        """GET (ranged when ``length``): the body lands in a reused per-connection buffer, is
        hashed there and compared with the checksum of what was written; nothing is kept."""
        endpoint = self.next_endpoint()
        path = quote_path(f"/{bucket}/{key}")
        base = {"Range": f"bytes={offset}-{offset + length - 1}"} if length else {}
        result = OpResult(endpoint=endpoint, start_ns=now_ns())
        h = Hasher()

        async def once() -> None:
            nonlocal h
            h = Hasher()
            headers = self.signer.sign("GET", self._hosts[endpoint], path, "", dict(base))
            resp = await self._gets.get(endpoint, path, headers, h.update)
            result.status, result.first_byte_ns = resp.status, resp.first_byte_ns
            if resp.status not in (200, 206):
                result.error = error_text(resp.status, resp.error_body)
            elif expected is not None and h.size != expected.length:
                result.error = f"{VERIFY_PREFIX}got {h.size} bytes, wrote {expected.length}"
            elif expected is not None and h.digest() != expected.checksum:
                result.error = f"{VERIFY_PREFIX}checksum mismatch"
            else:
                result.error = ""

        await self._lean(result, once)
        ok = not result.error or result.error.startswith(VERIFY_PREFIX)
        result.size = h.size if ok else 0
        return result

    async def head_object(self, bucket: str, key: str, expected_size: int) -> OpResult:
        async def check(resp: aiohttp.ClientResponse, res: OpResult) -> str:
            got = int(resp.headers.get("Content-Length", "-1"))
            if expected_size and got != expected_size:
                return f"{VERIFY_PREFIX}size {got}, wrote {expected_size}"
            return ""

        r = await self.request("HEAD", bucket, key, reader=check)
        r.size = 0
        return r

    async def delete_objects(self, bucket: str, keys: list[str]) -> OpResult:
        """DeleteObjects (quiet); per-key failures in the response count as an error."""
        xml = "".join(f"<Object><Key>{_xml_escape(k)}</Key></Object>" for k in keys)
        doc = f"<Delete><Quiet>true</Quiet>{xml}</Delete>".encode()
        md5 = base64.b64encode(hashlib.md5(doc).digest()).decode()

        async def check(resp: aiohttp.ClientResponse, res: OpResult) -> str:
            text = await resp.read()
            failed = text.count(b"<Error>")
            return f"{failed} of {len(keys)} keys not deleted" if failed else ""

        r = await self.request("POST", bucket, query={"delete": ""}, body=lambda: doc,
                               headers={"Content-MD5": md5, "Content-Type": "application/xml"},
                               payload_hash=hashlib.sha256(doc).hexdigest(), reader=check)
        r.count = len(keys)
        return r

    async def list_objects(self, bucket: str, prefix: str, keep_keys: bool = False) -> OpResult:
        """A full listing of ``prefix`` (all pages) as one operation; ``count`` objects."""
        token = ""
        total: OpResult | None = None
        page: list[bytes] = []

        async def read(resp: aiohttp.ClientResponse, res: OpResult) -> str:
            page.append(await resp.read())
            return ""

        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": "1000"}
            if token:
                query["continuation-token"] = token
            page.clear()
            r = await self.request("GET", bucket, query=query, reader=read)
            if total is None:
                total = r
                total.count = 0
            else:
                total.end_ns, total.status, total.error = r.end_ns, r.status, r.error
                total.retries += r.retries
            if r.error or not page:
                break
            keys = re.findall(rb"<Key>([^<]*)</Key>", page[0])
            total.count += len(keys)
            if keep_keys:
                total.keys.extend(xml_text(k) for k in keys)
            m = re.search(rb"<NextContinuationToken>([^<]+)</NextContinuationToken>", page[0])
            if not m or b"<IsTruncated>true</IsTruncated>" not in page[0]:
                break
            token = xml_text(m.group(1))
        assert total is not None
        return total

    async def delete_prefix(self, bucket: str, prefix: str, concurrency: int = 8,
                            rounds: int = 4) -> int:
        """Remove every object under ``prefix``; returns how many were removed.

        Lists again after deleting, a few rounds: a PUT the client stopped waiting for at the
        end of a phase can still land on the server after the first listing."""
        gate = asyncio.Semaphore(concurrency)

        async def one(batch: list[str]) -> int:
            async with gate:
                r = await self.delete_objects(bucket, batch)
                return 0 if r.error else len(batch)

        removed = 0
        for attempt in range(rounds):
            listing = await self.list_objects(bucket, prefix, keep_keys=True)
            if not listing.keys:
                break
            if attempt:
                await asyncio.sleep(0.2 * attempt)
            batches = [listing.keys[i:i + 1000] for i in range(0, len(listing.keys), 1000)]
            removed += sum(await asyncio.gather(*(one(b) for b in batches)))
        return removed


async def _complete_reader(resp: aiohttp.ClientResponse, res: OpResult) -> str:
    body = await resp.read()
    # S3 may answer 200 and put the error in the body (CompleteMultipartUpload)
    return error_text(resp.status, body) if b"<Error>" in body else ""


def _xml_escape(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&apos;"))

