"""Where a turn's lookup, reads and writes go: the gateway's native API or plain S3.

- :class:`GatewayTarget` (``--target http://HOST:PORT``): one ``/v1/NS/lookup`` per turn, one
  streamed ``batch-get`` per restore (as s3kv's client and LMCache plugin read a chain), and
  ``batch-put`` requests of up to ``batch_bytes`` each (several in flight), so the gateway packs
  the blocks into segments and restores a chain with coalesced ranged GETs.
- :class:`S3Target` (``--target s3://BUCKET/PREFIX?endpoint=URL``): one object per block, as a
  connector without a gateway stores them. Lookup is a HEAD per block (in windows of
  ``inflight``, stopping at the first absent block), reads are GETs, writes are PUTs.

Block bytes are windows onto the shared payload buffer of :mod:`warp.payload`, chosen by the
key, so no block is ever generated; every read is hashed as it arrives and checked against what
was written (a mismatch is counted, never taken as a hit). Errors are data (counted per call),
not exceptions. Every request can be recorded in Warp's record format (:mod:`warp.records`).
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlsplit

import aiohttp

from s3kv.client_io import BlockBody
from s3kv.client_stream import fetch_stream
from s3kv.clock import now_ns
from s3kv.errors import Backpressure, ConfigError, S3KVError
from s3kv.frames import FRAMES, STORED_HEADER, frames_head
from s3kv.wire.body import SlicedBody
from s3kv.wire.fastget import GetPool
from s3kv.wire.sigv4 import Credentials
from warp.opresult import OpResult
from warp.payload import Hasher, PayloadSource, variant_of
from warp.records import Record, RecordWriter
from warp.s3 import S3Client

#: the gateway answers at most this many keys per native request
MAX_BATCH_KEYS = 4096
READ_SLICE = 1 << 20
#: seconds a batch get may take (aiohttp's read timeout was 300 s between reads)
READ_TIMEOUT = 600.0
#: 503 SlowDown (gateway backpressure) is retried this many times, honouring Retry-After
BACKPRESSURE_RETRIES = 50


@dataclass
class IoResult:
    """What one lookup, read or write did."""

    blocks: int = 0  # blocks found (lookup), read and verified (read), or stored (write)
    bytes: int = 0
    missing: int = 0  # read: present at lookup, absent at read
    verify_failures: int = 0
    errors: int = 0
    retries: int = 0
    first_error: str = ""

    def add(self, other: IoResult) -> None:
        self.blocks += other.blocks
        self.bytes += other.bytes
        self.missing += other.missing
        self.verify_failures += other.verify_failures
        self.errors += other.errors
        self.retries += other.retries
        self.first_error = self.first_error or other.first_error

    def fail(self, text: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or text


def parse_target(url: str) -> tuple[str, str]:
    """``("gateway", URL)`` or ``("s3", URL)``; ConfigError for anything else."""
    scheme = urlsplit(url).scheme
    if scheme in ("http", "https"):
        return "gateway", url.rstrip("/")
    if scheme == "s3":
        from s3kv.backends import parse_s3_url

        parse_s3_url(url)  # validates
        return "s3", url
    raise ConfigError(f"invalid --target {url!r}: use http://HOST:PORT (the gateway's native "
                      "API) or s3://BUCKET/PREFIX?endpoint=URL (one object per block)")


@dataclass
class IoSetup:
    """What every target of a rank shares."""

    payload: PayloadSource
    block_bytes: int
    inflight: int  # requests in flight per user and call
    connections: int  # connection pool of the rank
    records: RecordWriter | None = None
    client_id: str = "r0"


class Target(ABC):
    def __init__(self, io: IoSetup) -> None:
        self.payload = io.payload
        self.block_bytes = io.block_bytes
        self.inflight = io.inflight
        self.records = io.records
        self.client_id = io.client_id
        self.endpoint = ""
        self.cat = 0  # the pass number, in the records' ``cat`` column

    def record(self, op: str, user: int, name: str, r: OpResult, n_objects: int) -> None:
        if self.records is None:
            return
        self.records.write(Record(
            op=op, thread=user, client_id=self.client_id, endpoint=r.endpoint or self.endpoint,
            file=name, size=r.size, start_ns=r.start_ns, end_ns=r.end_ns,
            first_byte_ns=r.first_byte_ns, error=r.error, http_status=r.status,
            retries=r.retries, n_objects=n_objects, cat=self.cat))

    def views(self, keys: Sequence[str]) -> list[memoryview]:
        out: list[memoryview] = []
        for k in keys:
            out.extend(self.payload.slices(variant_of(k), 0, self.block_bytes))
        return out

    @abstractmethod
    async def lookup(self, user: int, keys: Sequence[str]) -> IoResult:
        """``blocks`` = how many leading keys are present."""

    @abstractmethod
    async def read(self, user: int, keys: Sequence[str]) -> IoResult: ...

    @abstractmethod
    async def write(self, user: int, keys: Sequence[str]) -> IoResult: ...

    @abstractmethod
    async def close(self) -> None: ...


async def _bounded(n: int, jobs: list[Callable[[], Awaitable[IoResult]]]) -> IoResult:
    gate = asyncio.Semaphore(n)
    total = IoResult()

    async def one(job: Callable[[], Awaitable[IoResult]]) -> None:
        async with gate:
            total.add(await job())

    await asyncio.gather(*(one(j) for j in jobs))
    return total


async def _back_off(retry_after: float) -> None:
    """The wait before a request the gateway pushed back is sent again: its Retry-After, within
    50 ms to 1 s (a run measures throughput, not the gateway's hint)."""
    await asyncio.sleep(min(1.0, max(0.05, retry_after)))


class GatewayTarget(Target):
    def __init__(self, io: IoSetup, url: str, namespace: str, token: str,
                 batch_bytes: int) -> None:
        super().__init__(io)
        self.endpoint = url.rstrip("/")
        self.namespace = namespace
        self.batch = max(1, min(MAX_BATCH_KEYS, batch_bytes // self.block_bytes))
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._auth = headers
        self._pool = GetPool(connect_timeout=30)
        self._session = aiohttp.ClientSession(
            headers=headers, connector=aiohttp.TCPConnector(limit=io.connections),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=300),
            read_bufsize=READ_SLICE, auto_decompress=False)

    async def close(self) -> None:
        self._pool.close()
        await self._session.close()

    async def _post(self, path: str, result: OpResult, body: Callable[[], object],
                    headers: dict[str, str],
                    reader: Callable[[aiohttp.ClientResponse], Awaitable[None]],
                    on_503: Callable[[Mapping[str, str]], None] | None = None) -> int:
        """POST with retries on 503 (backpressure); the number of retries. ``on_503`` sees
        each retried 503's headers before ``body()`` and ``headers`` are used again."""
        url = f"{self.endpoint}/v1/{path}"
        for attempt in range(BACKPRESSURE_RETRIES + 1):
            try:
                async with self._session.post(url, data=body(), headers=headers) as resp:
                    result.first_byte_ns = now_ns()
                    result.status = resp.status
                    if resp.status == 503 and attempt < BACKPRESSURE_RETRIES:
                        await resp.read()
                        if on_503 is not None:
                            on_503(resp.headers)
                        await _back_off(float(resp.headers.get("Retry-After", "0.2") or 0.2))
                        continue
                    if resp.status >= 400:
                        text = (await resp.read())[:300].decode(errors="replace")
                        result.error = f"HTTP {resp.status}: {text}"
                    else:
                        await reader(resp)
                    return attempt
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
                result.error = f"{type(exc).__name__}: {exc}"
                return attempt
        return BACKPRESSURE_RETRIES

    async def lookup(self, user: int, keys: Sequence[str]) -> IoResult:
        out = IoResult()
        r = OpResult(endpoint=self.endpoint, start_ns=now_ns())
        doc: dict[str, object] = {}

        async def read_json(resp: aiohttp.ClientResponse) -> None:
            doc.update(json.loads(await resp.read()))

        # one request for the whole chain when it fits, else the leading prefix chunk by chunk
        for i in range(0, max(1, len(keys)), MAX_BATCH_KEYS):
            chunk = list(keys[i:i + MAX_BATCH_KEYS])
            body = json.dumps({"keys": chunk})
            out.retries += await self._post(
                f"{self.namespace}/lookup", r, lambda: body,  # noqa: B023 - awaited here
                {"Content-Type": "application/json"}, read_json)
            if r.error:
                out.fail(r.error)
                break
            found = int(str(doc.get("prefix", 0)))
            out.blocks += found
            if found < len(chunk):
                break
        r.end_ns = now_ns()
        self.record("KVLOOKUP", user, f"{len(keys)} keys", r, len(keys))
        return out

    async def read(self, user: int, keys: Sequence[str]) -> IoResult:
        """The prefix as s3kv's client and LMCache plugin restore one: a streamed batch get
        per ``MAX_BATCH_KEYS`` keys, one after the other (the gateway reads ahead within a
        request, and lets older requests' reads in first)."""
        out = IoResult()
        for i in range(0, len(keys), MAX_BATCH_KEYS):
            out.add(await self._get(user, list(keys[i:i + MAX_BATCH_KEYS])))
        return out

    async def _get(self, user: int, keys: list[str]) -> IoResult:
        """One batch get, read as s3kv's client reads it (client_stream.py over fastget: each
        block's bytes received straight into a reused buffer and hashed there, as the S3
        target's GETs are), 503s retried after their Retry-After."""
        out = IoResult()
        r = OpResult(endpoint=self.endpoint, start_ns=now_ns())
        buf = memoryview(bytearray(READ_SLICE))

        async def check(i: int, body: BlockBody | None) -> None:
            r.first_byte_ns = r.first_byte_ns or now_ns()
            if body is None:
                out.missing += 1
                return
            h = Hasher()
            while h.size < body.length:
                piece = buf[:min(body.length - h.size, READ_SLICE)]
                await body.readinto(piece)
                h.update(piece)
            want = self.payload.expected(variant_of(keys[i]), 0, self.block_bytes)
            if h.size != want.length or h.digest() != want.checksum:
                out.verify_failures += 1
            else:
                out.blocks += 1
                out.bytes += h.size

        for attempt in range(BACKPRESSURE_RETRIES + 1):
            out.retries = attempt
            try:
                async with asyncio.timeout(READ_TIMEOUT):
                    await fetch_stream(self._pool, self.endpoint, self.namespace, self._auth,
                                       keys, range(len(keys)), check, [False] * len(keys))
                r.status = 200
            except Backpressure as exc:
                if attempt < BACKPRESSURE_RETRIES:
                    await _back_off(exc.retry_after)
                    continue
                r.status, r.error = 503, f"HTTP 503: {exc}"
            except (S3KVError, TimeoutError, OSError) as exc:
                r.status = getattr(exc, "status", None) or 0
                r.error = f"{type(exc).__name__}: {exc}"
            break
        if r.error:
            out.fail(r.error)
        r.end_ns, r.size = now_ns(), out.bytes
        self.record("KVGET", user, f"{len(keys)} blocks", r, len(keys))
        return out

    async def write(self, user: int, keys: Sequence[str]) -> IoResult:
        chunks = [list(keys[i:i + self.batch]) for i in range(0, len(keys), self.batch)]
        return await _bounded(self.inflight, [partial(self._put, user, c) for c in chunks])

    async def _put(self, user: int, keys: list[str]) -> IoResult:
        out = IoResult()
        r = OpResult(endpoint=self.endpoint, start_ns=now_ns())
        done = 0  # leading blocks a 503 said were stored: a retry sends only the rest
        doc: dict[str, int] = {}
        headers = {"Content-Type": FRAMES}

        def body() -> SlicedBody:
            rest = keys[done:]
            parts = [memoryview(frames_head([(k, self.block_bytes) for k in rest])),
                     *self.views(rest)]
            headers["Content-Length"] = str(sum(len(p) for p in parts))
            return SlicedBody(parts)

        def partly_stored(resp_headers: Mapping[str, str]) -> None:
            nonlocal done
            done += int(resp_headers.get(STORED_HEADER) or 0)

        async def read_json(resp: aiohttp.ClientResponse) -> None:
            doc.update(json.loads(await resp.read()))

        out.retries = await self._post(f"{self.namespace}/batch-put", r, body, headers,
                                       read_json, partly_stored)
        if r.error:
            out.fail(r.error)
        else:
            out.blocks = done + int(doc.get("stored", 0))
            out.bytes = out.blocks * self.block_bytes
        r.end_ns, r.size = now_ns(), out.bytes
        self.record("KVPUT", user, f"{len(keys)} blocks", r, len(keys))
        return out

    async def stats(self) -> dict[str, float]:
        async with self._session.get(f"{self.endpoint}/v1/stats") as resp:
            if resp.status != 200:
                return {}
            doc: dict[str, float] = await resp.json()
            return doc


class S3Target(Target):
    def __init__(self, io: IoSetup, url: str, run_prefix: str, creds: Credentials) -> None:
        super().__init__(io)
        from s3kv.backends import parse_s3_url

        loc = parse_s3_url(url)
        self.bucket = loc.bucket
        self.prefix = f"{loc.prefix}{run_prefix}"
        self.endpoint = loc.endpoints[0]
        self.client = S3Client(loc.endpoints, creds, self.payload, connections=io.connections,
                               retries=3)

    async def close(self) -> None:
        await self.client.close()

    async def lookup(self, user: int, keys: Sequence[str]) -> IoResult:
        out = IoResult()
        for i in range(0, len(keys), self.inflight):
            window = keys[i:i + self.inflight]
            rs = await asyncio.gather(*(self.client.head_object(self.bucket, self.prefix + k, 0)
                                        for k in window))
            present = 0
            for k, r in zip(window, rs, strict=True):
                self.record("HEAD", user, k, r, 1)
                if r.error and r.status != 404:
                    out.fail(r.error)
                    return out
                if r.error:
                    break
                present += 1
            out.blocks += present
            if present < len(window):
                break
        return out

    async def read(self, user: int, keys: Sequence[str]) -> IoResult:
        async def one(k: str) -> IoResult:
            want = self.payload.expected(variant_of(k), 0, self.block_bytes)
            r = await self.client.get_object(self.bucket, self.prefix + k, want)
            self.record("GET", user, k, r, 1)
            res = IoResult(retries=r.retries)
            if r.status == 404:
                res.missing = 1
            elif r.error.startswith("verify: "):
                res.verify_failures = 1
            elif r.error:
                res.fail(r.error)
            else:
                res.blocks, res.bytes = 1, r.size
            return res

        return await _bounded(self.inflight, [partial(one, k) for k in keys])

    async def write(self, user: int, keys: Sequence[str]) -> IoResult:
        async def one(k: str) -> IoResult:
            r = await self.client.put_object(self.bucket, self.prefix + k, variant_of(k),
                                             self.block_bytes)
            self.record("PUT", user, k, r, 1)
            res = IoResult(retries=r.retries)
            if r.error:
                res.fail(r.error)
            else:
                res.blocks, res.bytes = 1, self.block_bytes
            return res

        return await _bounded(self.inflight, [partial(one, k) for k in keys])
