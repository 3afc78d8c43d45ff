"""Ranged GETs of the S3 backend without botocore: the store's hot read path.

Every block read is one ranged GET of a segment. Through aiobotocore one costs the gateway
~2.3 ms of CPU for 256 KiB and ~5.3 ms for 2 MiB here (request building, signing through the
event system, response parsing, a bytes object per socket read and a join), about twice what
the GET itself costs. This path signs with SigV4 (s3kv.wire.sigv4), sends the request on a
keep-alive connection of s3kv.wire.fastget's pool and copies the body from the connection's
reused receive buffer into one buffer of the requested length: ~0.9 and ~2.5 ms.

Errors are translated onto s3kv.errors as S3Backend.translate does for botocore's.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from s3kv.backends.base import Sink
from s3kv.errors import BackendError, BackendUnavailable, ObjectMissing
from s3kv.wire.fastget import GetPool, ProtocolError, Response
from s3kv.wire.landing import landing_of
from s3kv.wire.sigv4 import EMPTY_SHA256, Credentials, Signer, quote_path

_CODE = re.compile(rb"<Code>([^<]{1,64})</Code>")
_PARTIAL = frozenset({206})
_FROM_ZERO = frozenset({200, 206})
_TRANSIENT_CODES = {b"SlowDown", b"ServiceUnavailable", b"InternalError", b"RequestTimeout",
                    b"XMinioServerNotInitialized"}


#: the current credentials, from botocore's provider chain (refreshed by it when they expire:
#: web identity, instance roles), so that this path signs with what botocore would
CredentialSource = Callable[[], Awaitable[Credentials]]


class RangedReader:
    def __init__(self, bucket: str, credentials: CredentialSource, ca_file: str,
                 stall: float = 0.0) -> None:
        """``ca_file``: the CA bundle botocore verifies https endpoints with; ``stall``: seconds
        a read may go without a byte before it is given up (0: never; the caller's timeout)."""
        self.bucket = bucket
        self.stall = stall
        self._credentials = credentials
        self._signer: Signer | None = None
        self._pool = GetPool(ssl.create_default_context(cafile=ca_file))

    async def _current_signer(self) -> Signer:
        creds = await self._credentials()
        if self._signer is None or self._signer.creds != creds:
            self._signer = Signer(creds)  # its signing key is derived once per day
        return self._signer

    async def read(self, endpoint: str, key: str, start: int, length: int) -> bytearray:
        """Bytes [start, start + length) of ``key`` (fewer if the object ends first)."""
        buf = bytearray(length)
        got = 0

        def sink(view: memoryview) -> None:
            nonlocal got
            out[got:got + len(view)] = view  # through a memoryview: one copy (a bytearray's
            got += len(view)  # slice assignment copies a non-bytearray value first)

        with memoryview(buf) as out:
            await self.stream(endpoint, key, start, length, sink)
        if got < length:
            del buf[got:]
        return buf

    async def stream(self, endpoint: str, key: str, start: int, length: int,
                     sink: Sink) -> int:
        """Feed bytes [start, start + length) of ``key`` to ``sink`` as they arrive; return
        how many (fewer if the object ends first). Errors may come after some were fed."""
        what = f"GET {key} [{start}+{length}]"
        path = quote_path(f"/{self.bucket}/{key}")
        headers = {"range": f"bytes={start}-{start + length - 1}"}
        signer = await self._current_signer()
        signer.sign("GET", urlsplit(endpoint).netloc, path, "", headers,
                    payload_hash=EMPTY_SHA256)
        bounded = _Bounded(sink, length)
        try:
            # a 200 is the whole object (the server ignored Range): its bytes are not the
            # range's unless the range starts at 0, so they never reach the sink
            get = self._pool.get(endpoint, path, headers, bounded,
                                 _FROM_ZERO if start == 0 else _PARTIAL)
            resp = await (_unless_stalled(get, bounded, self.stall, what) if self.stall > 0
                          else get)
        except (ProtocolError, OSError) as exc:  # ConnectionError is an OSError
            raise BackendUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
        if resp.status == 206 or (resp.status == 200 and start == 0 and resp.size == length):
            return bounded.got
        if resp.status == 200:
            raise BackendError(f"{what}: the server ignored the Range header", transient=False,
                               status=200)
        m = _CODE.search(resp.error_body)
        code = m.group(1) if m else b""
        msg = f"{what}: {code.decode(errors='replace') or resp.status}"
        if resp.status == 404 and code != b"NoSuchBucket":
            raise ObjectMissing(msg)
        if resp.status >= 500 or resp.status == 429 or code in _TRANSIENT_CODES:
            raise BackendUnavailable(msg, status=resp.status)
        raise BackendError(msg, transient=False, status=resp.status)

    async def presign(self, endpoint: str, key: str, expires: int) -> str:
        """A URL anyone holding it can GET ``key`` with (a Range header may be added) for
        ``expires`` seconds, signed as this reader signs its own GETs."""
        path = quote_path(f"/{self.bucket}/{key}")
        signer = await self._current_signer()
        query = signer.presign("GET", urlsplit(endpoint).netloc, path, expires)
        return f"{endpoint.rstrip('/')}{path}?{query}"

    def close(self) -> None:
        self._pool.close()


async def _unless_stalled(get: Awaitable[Response], bounded: _Bounded, stall: float,
                          what: str) -> Response:
    """``get``, given up once it has gone ``stall`` seconds without a byte (looked at every
    half of that: nothing per chunk received). A hung server (radosgw stopped by a signal, a
    stuck OSD) accepts the connection and never answers: without this a restore waited out the
    backend timeout, 30 s, where an engine would rather recompute its prefix. Raises
    BackendError, not retried: a read on a hung server is a miss. The exchange runs as a task
    of its own, watched from here (``asyncio.timeout`` around it hung the gateway's per-block
    GETs in benchmarks/gateway.py, even set to 1,000 s)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(get)
    seen, since = bounded.got, loop.time()
    try:
        while True:
            done, _ = await asyncio.wait((task,), timeout=stall / 2)
            if done:
                return task.result()
            if bounded.got != seen:
                seen, since = bounded.got, loop.time()
            elif loop.time() - since >= stall:
                raise BackendError(f"{what}: no bytes for {stall:g} s (the server does not "
                                   "answer)", transient=False)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class _Bounded:
    """The caller's sink, fed never more than ``length`` bytes whatever is sent; a sink that
    takes bytes in place (``fastget.Landing``) still can, within the same bound."""

    def __init__(self, sink: Sink, length: int) -> None:
        self._sink = sink
        self._landing = landing_of(sink)
        self._length = length
        self.got = 0

    def __call__(self, view: memoryview) -> None:
        n = min(len(view), self._length - self.got)
        if n > 0:
            self.got += n
            self._sink(view[:n])

    def space(self) -> memoryview | None:
        if self._landing is None or self.got >= self._length:
            return None
        space = self._landing.space()
        return None if space is None else space[:self._length - self.got]

    def landed(self, n: int) -> None:
        assert self._landing is not None
        self.got += n
        self._landing.landed(n)
