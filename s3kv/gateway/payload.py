"""Request bodies of the S3 front, streamed: framing, size limit, signatures and digests.

:class:`BodyReader` wraps an aiohttp ``StreamReader`` (anything with ``readexactly`` and
``readline``). Iterating it yields the *decoded* payload in pieces of at most ``piece_size``
bytes (plain bodies and ``aws-chunked`` bodies alike, one copy: the bytes aiohttp hands over);
then ``await verify()`` runs the end-of-body checks and returns a :class:`BodyResult`.

Errors while streaming: EntityTooLarge (declared or actual size over ``max_size``, checked up
front and while reading), IncompleteBody (the stream ended early: client disconnect), a bad
chunk signature (SignatureDoesNotMatch), malformed chunk framing (IncompleteBody or
InvalidRequest). Errors from ``verify()``: XAmzContentSHA256Mismatch, BadDigest (Content-MD5 or
``x-amz-checksum-*``, header or trailer), IncompleteBody (decoded length short). Header problems
(InvalidDigest, bad checksum headers, undeclared trailers) are raised by the constructor, before a
byte is read. Nothing read is trustworthy until ``verify()`` has returned: the caller keeps the
pieces private (a buffer it can drop) until then.

The MD5 for the ETag is computed by default (``md5=False``: ``--etag fast``); ``crc=True`` adds
the store's CRC-32 (``BodyResult.crc``; a body that lands has it from its landing). Digests are
fed piece by piece, never on a joined body, large bodies' in a worker thread while the loop
reads on (digests.py). Plain bodies are handed over in the pieces aiohttp received them in (no
join, no copy); aws-chunked ones in pieces of at most ``piece_size``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import ClientError
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from s3kv.errors import RequestError
from s3kv.gateway.body_headers import b64, checksum_headers, int_header
from s3kv.gateway.checksums import ALGORITHMS, Checksum, LandedCrc, new_checksum
from s3kv.gateway.digests import OFFLOAD_BYTES, BodyDigests
from s3kv.sizes import MiB
from s3kv.wire.headers import HeaderValues, comma_list
from s3kv.wire.sigv4 import (
    EMPTY_SHA256,
    PayloadMode,
    chunk_string_to_sign,
    parse_payload_mode,
    signature,
)
from s3kv.wire.sigv4_verify import AuthContext

PIECE_SIZE = 1 * MiB
_MAX_LINE = 4096
_MAX_TRAILERS = 16
#: what a broken body stream raises; RequestPayloadError: aiohttp could not parse the HTTP
#: framing (Transfer-Encoding: chunked) or the Content-Encoding of the body
_STREAM_ERRORS = (asyncio.IncompleteReadError, ConnectionError, ClientError,
                  HttpProcessingError, RequestPayloadError, EOFError)


class ChunkStream(Protocol):
    async def readchunk(self) -> tuple[bytes | memoryview, bool]: ...
    def at_eof(self) -> bool: ...


class ByteStream(ChunkStream, Protocol):
    async def readexactly(self, n: int) -> bytes: ...
    async def readline(self) -> bytes: ...
    async def read(self, n: int = -1) -> bytes: ...


@dataclass(frozen=True)
class BodyResult:
    size: int
    md5_hex: str | None
    #: the body's CRC-32 as the store keeps it (``layout.checksum``), when asked for
    crc: int | None = None
    #: verified client checksums, algorithm -> base64 value (as in x-amz-checksum-<algorithm>)
    checksums: dict[str, str] = field(default_factory=dict)

    @property
    def etag(self) -> str | None:
        return f'"{self.md5_hex}"' if self.md5_hex else None


def _incomplete() -> RequestError:
    return RequestError("IncompleteBody", "You did not provide the number of bytes specified "
                        "by the Content-Length HTTP header.")


class BodyReader:
    def __init__(self, stream: ByteStream, heads: HeaderValues,
                 auth: AuthContext | None = None, *, max_size: int,
                 piece_size: int = PIECE_SIZE, md5: bool = True, crc: bool = False,
                 offload_bytes: int = OFFLOAD_BYTES) -> None:
        self._stream = stream
        self._chunks: ChunkStream = stream
        self._auth = auth
        self._max_size = max_size
        self._piece = piece_size
        if auth is not None:
            self.mode, self._content_sha = auth.payload_mode, auth.content_sha256
        else:
            sha = heads.get("x-amz-content-sha256")
            self.mode, self._content_sha = (parse_payload_mode(sha[0].strip()) if sha
                                            else (PayloadMode.UNSIGNED, None))
        if "aws-chunked" in comma_list(heads, "content-encoding") and not self.mode.streaming:
            raise RequestError("InvalidRequest", "Content-Encoding aws-chunked needs a "
                               "STREAMING-* x-amz-content-sha256")
        length = int_header(heads, "content-length")
        #: the payload size the client announced (None: unknown, read to the end)
        self.declared_size = (int_header(heads, "x-amz-decoded-content-length")
                              if self.mode.streaming else length)
        if self.declared_size is not None and self.declared_size > max_size:
            raise self._too_large()
        md5_header = heads.get("content-md5")
        self._md5_expected = b64(md5_header[0], 16) if md5_header else None
        if md5_header and self._md5_expected is None:
            raise RequestError("InvalidDigest", "The Content-MD5 you specified was invalid.")
        self._algo, self._expected_b64 = checksum_headers(heads, self.mode)
        self._md5 = hashlib.md5() if (md5 or self._md5_expected is not None) else None
        self._checksum: Checksum | None = None
        self._sha = hashlib.sha256() if self._content_sha is not None else None
        if self._algo == "sha256" and self._sha is not None:
            self._checksum = self._sha
        elif self._algo is not None:  # a crc32 one may be worked out by the body's landing
            self._checksum = (LandedCrc(self.declared_size or 0) if self._algo == "crc32"
                              else new_checksum(self._algo))
        self._crc: Checksum | None = None
        if crc:  # the store's CRC-32 is the client's crc32 checksum when it sends one
            self._crc = self._checksum if self._algo == "crc32" \
                else LandedCrc(self.declared_size or 0)
        hashers: list[Any] = [self._md5, self._sha, self._checksum, self._crc]
        self._digests = BodyDigests([h for h in hashers if h is not None], offload_bytes)
        self.size = 0
        self._started = False
        self._done = False
        self._trailers: dict[str, str] = {}

    @property
    def plain(self) -> bool:
        """The body is the payload as it is, of a declared size (no aws-chunked framing)."""
        return not self.mode.streaming and self.declared_size is not None

    def read_pieces_from(self, stream: ChunkStream) -> None:
        """Read a :attr:`plain` body's pieces from ``stream`` (before reading starts)."""
        if self._started or not self.plain:
            raise RuntimeError("only a plain body not yet read can change its stream")
        self._chunks = stream

    def landing_crc(self) -> LandedCrc | None:
        """The body's store CRC-32 (the client's crc32 checksum too, if it sent one) for its
        landing to work out instead of the reader (:meth:`crc_landed`); None: none asked."""
        return self._crc if isinstance(self._crc, LandedCrc) else None

    def crc_landed(self) -> None:
        """The body lands (not read yet): its landing feeds :meth:`landing_crc`."""
        assert self._crc is not None and not self._started
        self._digests.drop(self._crc)

    def _too_large(self) -> RequestError:
        return RequestError("EntityTooLarge", "Your proposed upload exceeds the maximum allowed "
                            f"object size ({self._max_size} bytes).")

    # -- streaming ----------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[bytes | memoryview]:
        self._start()
        return self._iterate()

    def _start(self) -> None:
        if self._started:
            raise RuntimeError("a request body can be iterated once")
        self._started = True

    async def collect(self, progress: Callable[[], None]) -> list[bytes | memoryview]:
        """The whole payload's pieces (what iterating yields), calling ``progress()`` as each
        arrives. A plain body of a declared length, the common PUT, is read in one loop here:
        iterating costs three async-generator hops per piece, a few percent of a small PUT."""
        pieces: list[bytes | memoryview] = []
        if self.mode.streaming or self.declared_size is None:  # not plain
            async for piece in self:
                progress()
                pieces.append(piece)
            return pieces
        self._start()
        remaining, digests = self.declared_size, self._digests
        try:
            while remaining > 0:
                piece = await self._plain_piece(remaining)
                progress()
                remaining -= len(piece)
                self.size += len(piece)
                pieces.append(piece)
                if digests.add(piece):
                    await digests.spill()
        except RequestError:
            raise
        except _STREAM_ERRORS as exc:
            raise _incomplete() from exc
        self._done = True
        return pieces

    async def _iterate(self) -> AsyncIterator[bytes | memoryview]:
        try:
            parts = self._chunked() if self.mode.streaming else self._plain()
            async for piece in parts:
                yield piece
        except RequestError:
            raise
        except _STREAM_ERRORS as exc:
            raise _incomplete() from exc
        self._done = True

    async def _digest(self, piece: bytes | memoryview) -> None:
        self.size += len(piece)
        if self.size > self._max_size:
            raise self._too_large()
        await self._digests.feed(piece)

    async def _plain(self) -> AsyncIterator[bytes | memoryview]:
        remaining = self.declared_size
        if remaining is None:
            while whole := await self._stream.read(self._piece):
                await self._digest(whole)
                yield whole
            return
        while remaining > 0:
            piece = await self._plain_piece(remaining)
            remaining -= len(piece)
            await self._digest(piece)
            yield piece

    async def _plain_piece(self, remaining: int) -> bytes | memoryview:
        """The next piece of a plain body ``remaining`` bytes short of its Content-Length, as
        aiohttp received it (readexactly would join pieces: a copy)."""
        while not (piece := (await self._chunks.readchunk())[0]):
            if self._chunks.at_eof():
                raise asyncio.IncompleteReadError(b"", remaining)
            # else an HTTP chunk boundary (Transfer-Encoding: chunked)
        if len(piece) > remaining:  # never from aiohttp: it stops at Content-Length
            raise RequestError("IncompleteBody", "The body is longer than its Content-Length.")
        return piece

    async def _line(self) -> bytes:
        try:
            line = await self._stream.readline()
        except ValueError as exc:  # aiohttp: line over its buffer limit
            raise self._malformed("a chunk header line is too long") from exc
        if not line:
            raise EOFError
        if len(line) > _MAX_LINE or not line.endswith(b"\r\n"):
            if not line.endswith(b"\n") and len(line) <= _MAX_LINE:
                raise EOFError  # the stream ended inside the line
            raise self._malformed("a chunk header line is malformed or too long")
        return line[:-2]

    @staticmethod
    def _malformed(why: str) -> RequestError:
        return RequestError("InvalidRequest", f"malformed aws-chunked body: {why}")

    def _sign(self, kind: str, prev: str, digest: str) -> str:
        assert self._auth is not None
        return signature(self._auth.signing_key, chunk_string_to_sign(
            kind, self._auth.amz_date, self._auth.scope, prev, digest))

    async def _chunked(self) -> AsyncIterator[bytes]:
        verify = self.mode.chunk_signed and self._auth is not None
        prev = self._auth.seed_signature if self._auth is not None else ""
        while True:
            size_text, _, ext = (await self._line()).partition(b";")
            try:
                size = int(size_text, 16)
            except ValueError:
                raise self._malformed(f"bad chunk size {size_text[:20]!r}") from None
            if size < 0:
                raise self._malformed("negative chunk size")
            if self.size + size > self._max_size:
                raise self._too_large()
            if self.declared_size is not None and self.size + size > self.declared_size:
                raise RequestError("InvalidRequest", "the aws-chunked body is longer than "
                                   "x-amz-decoded-content-length")
            signature = None
            if self.mode.chunk_signed:
                name, _, value = ext.partition(b"=")
                if name.strip() != b"chunk-signature" or not value:
                    raise self._malformed("a chunk has no chunk-signature")
                signature = value.strip()  # bytes: compared as bytes, never decoded
            chunk_hash = hashlib.sha256() if verify else None
            remaining = size
            while remaining > 0:
                piece = await self._stream.readexactly(min(remaining, self._piece))
                remaining -= len(piece)
                await self._digest(piece)
                if chunk_hash is not None:
                    chunk_hash.update(piece)
                yield piece
            if verify and signature is not None:
                assert chunk_hash is not None
                expected = self._sign("AWS4-HMAC-SHA256-PAYLOAD", prev, EMPTY_SHA256 + "\n" +
                                      chunk_hash.hexdigest())
                # as bytes: compare_digest refuses str with non-ASCII characters (a TypeError,
                # which was a 500 for a chunk-signature carrying a stray byte)
                if not hmac.compare_digest(expected.encode(), signature):
                    raise RequestError("SignatureDoesNotMatch", "The chunk signature we "
                                       "calculated does not match the one you provided.", 403)
                prev = expected
            if size == 0:
                break
            if await self._stream.readexactly(2) != b"\r\n":
                raise self._malformed("chunk data is not followed by CRLF")
        if self.mode.trailer:
            await self._read_trailers(prev, verify)
        else:
            try:
                end = await self._stream.readexactly(2)
            except asyncio.IncompleteReadError as exc:
                end = exc.partial
            if end not in (b"\r\n", b""):
                raise self._malformed("the final chunk is not followed by CRLF")

    async def _read_trailers(self, prev: str, verify: bool) -> None:
        signature = None
        for _ in range(_MAX_TRAILERS + 2):
            try:
                line = await self._line()
            except EOFError:
                break  # some clients end the body right after the last trailer
            if not line:
                break
            name, sep, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if not sep:
                raise self._malformed(f"bad trailer line {line[:40]!r}")
            if name == "x-amz-trailer-signature":
                signature = value.strip()
            elif name in self._trailers or len(self._trailers) >= _MAX_TRAILERS:
                raise self._malformed("too many or repeated trailers")
            else:
                self._trailers[name] = value.strip()
        else:
            raise self._malformed("the trailer section does not end")
        if verify:
            canonical = "".join(f"{n}:{v}\n" for n, v in sorted(self._trailers.items()))
            expected = self._sign("AWS4-HMAC-SHA256-TRAILER", prev,
                                  hashlib.sha256(canonical.encode()).hexdigest())
            if signature is None or not hmac.compare_digest(expected.encode(),
                                                            signature.encode("latin-1")):
                raise RequestError("SignatureDoesNotMatch", "The trailer signature we "
                                   "calculated does not match the one you provided.", 403)

    # -- end of body ---------------------------------------------------------------------------

    async def verify(self) -> BodyResult:
        """End-of-body checks; call after iterating to the end. Returns sizes and digests."""
        if not self._done:
            raise RuntimeError("iterate the body to its end before verify()")
        await self._digests.finish()
        if self.declared_size is not None and self.size != self.declared_size:
            raise RequestError("IncompleteBody", "You did not provide the number of bytes "
                               "specified by x-amz-decoded-content-length.")
        if self._sha is not None and self._sha.hexdigest() != self._content_sha:
            raise RequestError("XAmzContentSHA256Mismatch", "The provided "
                               "'x-amz-content-sha256' header does not match what was computed.")
        if self._md5_expected is not None:
            assert self._md5 is not None
            if not hmac.compare_digest(self._md5.digest(), self._md5_expected):
                raise RequestError("BadDigest",
                                   "The Content-MD5 you specified did not match what we received.")
        checksums: dict[str, str] = {}
        if self._algo is not None:
            assert self._checksum is not None
            expected = self._expected_b64
            if self.mode.trailer and expected is None:
                expected = self._trailers.get(f"x-amz-checksum-{self._algo}")
                if expected is None or b64(expected, ALGORITHMS[self._algo][1]) is None:
                    raise RequestError("InvalidRequest", f"the declared trailer "
                                       f"x-amz-checksum-{self._algo} is missing or invalid")
            actual = base64.b64encode(self._checksum.digest()).decode()
            if expected is not None:
                if actual != expected:
                    raise RequestError("BadDigest", f"The {self._algo.upper()} you specified "
                                       "did not match the calculated checksum.")
                checksums[self._algo] = actual
        elif any(t.startswith("x-amz-checksum-") for t in self._trailers):
            raise RequestError("InvalidRequest", "a checksum trailer was sent without being "
                               "declared in x-amz-trailer")
        return BodyResult(size=self.size,
                          md5_hex=self._md5.hexdigest() if self._md5 is not None else None,
                          crc=(int.from_bytes(self._crc.digest(), "big")
                               if self._crc is not None else None),
                          checksums=checksums)

    async def read_all(self) -> bytes:
        """The whole (small) body, verified: for XML request bodies and tests."""
        pieces = [piece async for piece in self]
        await self.verify()
        return b"".join(pieces)
