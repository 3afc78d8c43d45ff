"""The native API's two body formats (docs/api.md, "Framing"), written and parsed here only.

``application/x-s3kv-frames`` (batch-put requests): lengths first, so the gateway knows every
block's size before it stores any::

    u32 N (LE) | N bytes of JSON {"blocks": [{"key": K, "length": L}, ...]} | the blocks' bytes

``application/x-s3kv-stream`` (batch-get responses): one record per requested key, in request
order, each sent as soon as its block is read and verified, then an end record::

    record := u32 N (LE) | N bytes of JSON | L bytes (only for a block)
    JSON    = {"key": K, "length": L} | {"key": K, "missing": true} | {"end": true, "count": C}

Anything after the end record, a missing end record or a count that differs from the records
sent is malformed.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Sequence
from typing import Any, Protocol

from s3kv.errors import RequestError

FRAMES = "application/x-s3kv-frames"
#: on a batch put's 503 SlowDown: how many of its leading blocks were stored before it
STORED_HEADER = "x-s3kv-stored"
STREAM = "application/x-s3kv-stream"
#: a record's JSON header never legitimately needs more (keys are at most 1 KiB)
MAX_HEADER = 64 * 1024
_LEN = struct.Struct("<I")
#: room a batch-put body's limit leaves for its head beyond the blocks' bytes: the JSON of 4096
#: keys of up to 1 KiB each, with escaping (a batch of 64 blocks of the max block size fits)
HEAD_ALLOWANCE = 8 * 1024 * 1024
#: blocks of one batch put at most (the native API's keys per request)
MAX_BLOCKS = 4096
#: the largest batch-put head parsed: 4096 keys of 1 KiB in the widest escaping (``\uXXXX``
#: pairs: 3 bytes of JSON per byte of key) fit; parsing a larger one is memory and time spent
#: on nothing a client sends
MAX_HEAD = 2 * HEAD_ALLOWANCE


class Readable(Protocol):
    """What the parser needs of a response stream (aiohttp's StreamReader has it)."""

    async def readexactly(self, n: int) -> bytes: ...

    async def read(self, n: int = -1) -> bytes: ...


# ---- batch-put bodies ----------------------------------------------------------------------
def frames_head(sizes: Sequence[tuple[str, int]]) -> bytes:
    """The head of a framed batch-put body for blocks of these (key, length)."""
    head = json.dumps({"blocks": [{"key": k, "length": n} for k, n in sizes]}).encode()
    return _LEN.pack(len(head)) + head


def encode_frames(items: Sequence[tuple[str, bytes | memoryview]]) -> list[bytes | memoryview]:
    """Head and blocks of a framed batch-put body, as separate buffers (no concatenation)."""
    return [frames_head([(k, len(d)) for k, d in items]), *[d for _, d in items]]


class _Cursor:
    """Reads a body kept in the pieces it arrived in, as views of those pieces (no join)."""

    def __init__(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        self._views = [memoryview(p).cast("B") for p in pieces if len(p)]
        self._i = 0
        self._off = 0
        self.left = sum(map(len, self._views))

    def take(self, n: int) -> list[memoryview]:
        """The next ``n`` bytes, as views (one per piece they span)."""
        if n < 0 or n > self.left:
            raise ValueError("block lengths exceed the body")
        out: list[memoryview] = []
        self.left -= n
        while n:
            view = self._views[self._i]
            k = min(n, len(view) - self._off)
            out.append(view[self._off:self._off + k])
            self._off += k
            n -= k
            if self._off == len(view):
                self._i, self._off = self._i + 1, 0
        return out


def _head_blocks(doc: bytes) -> list[tuple[str, int]]:
    """(key, length) of each block a batch-put body's head lists: a string and an integer
    each, nothing converted. Raises ValueError on a malformed head."""
    try:
        parsed = json.loads(doc)
    except RecursionError:
        raise ValueError("the head is nested too deep") from None
    blocks = parsed.get("blocks") if isinstance(parsed, dict) else None
    if not isinstance(blocks, list):
        raise ValueError('the head is not {"blocks": [...]}')
    if len(blocks) > MAX_BLOCKS:
        raise ValueError(f"{len(blocks)} blocks, at most {MAX_BLOCKS} per batch put")
    out: list[tuple[str, int]] = []
    for i, b in enumerate(blocks):
        key, length = (b.get("key"), b.get("length")) if isinstance(b, dict) else (None, None)
        if not isinstance(key, str) or not isinstance(length, int) or isinstance(length, bool):
            raise ValueError(f'block {i} is not {{"key": STRING, "length": INTEGER}}')
        out.append((key, length))
    return out


def decode_frames(body: Sequence[bytes | bytearray | memoryview]
                  ) -> list[tuple[str, list[memoryview]]]:
    """Parse a framed batch-put body, given in the pieces it arrived in: each block comes back
    as views of those pieces (the store copies them into its segment; nothing is joined).
    Raises RequestError on any inconsistency."""
    cursor = _Cursor(body)
    try:
        (n,) = _LEN.unpack(b"".join(cursor.take(_LEN.size)))
        if n > MAX_HEAD:
            raise ValueError(f"a head of {n} bytes, over {MAX_HEAD}")
        blocks = _head_blocks(b"".join(cursor.take(n)))
        out = [(key, cursor.take(length)) for key, length in blocks]
    except (struct.error, ValueError) as exc:
        raise RequestError("MalformedFrames", f"invalid batch framing: {exc}") from None
    if cursor.left:
        raise RequestError("MalformedFrames", "trailing bytes after the last block")
    return out


async def read_head(stream: Readable, length: int
                    ) -> tuple[list[bytes], list[tuple[str, int]] | None]:
    """The head of a framed batch-put body of ``length`` bytes, read off ``stream``: the bytes
    read, and the (key, length) of each block it lists if the rest of the body is exactly
    those blocks (None: a head that does not parse or does not add up; :func:`decode_frames`
    of the whole body says what is wrong). Raises RequestError (IncompleteBody) on a body
    that ends before its head does."""
    try:
        prefix, doc = await _read_prefixed(stream, min(HEAD_ALLOWANCE, length - _LEN.size))
    except asyncio.IncompleteReadError:
        raise RequestError("IncompleteBody", "The request body ended before its declared "
                           "length.") from None
    if doc is None:
        return [prefix], None
    try:
        blocks = _head_blocks(doc)
    except ValueError:
        return [prefix, doc], None
    sizes = [size for _, size in blocks]
    if any(size < 0 for size in sizes) or _LEN.size + len(doc) + sum(sizes) != length:
        return [prefix, doc], None
    return [prefix, doc], blocks


# ---- batch-get responses -------------------------------------------------------------------
def _record(doc: dict[str, object]) -> bytes:
    head = json.dumps(doc, separators=(",", ":")).encode()
    return _LEN.pack(len(head)) + head


def block_record(key: str, length: int | None) -> bytes:
    """The header of one block's record (``length`` None: the key is missing)."""
    return _record({"key": key, "missing": True} if length is None
                   else {"key": key, "length": length})


def end_record(count: int) -> bytes:
    return _record({"end": True, "count": count})


async def read_doc(stream: Readable, limit: int = MAX_HEADER) -> Any:
    """One length-prefixed JSON document off the stream: a batch-get record's header, or a
    batch-put body's head (``frames_head``). Raises ValueError if it declares more than
    ``limit`` bytes or is not JSON, asyncio.IncompleteReadError on a truncated stream."""
    n = header_length(await stream.readexactly(_LEN.size), limit)
    return header_doc(await stream.readexactly(n))


async def _read_prefixed(stream: Readable, limit: int) -> tuple[bytes, bytes | None]:
    """A length prefix off the stream, then the document it announces (None, left unread: it
    declares more than ``limit`` bytes). asyncio.IncompleteReadError on a truncated stream."""
    prefix = await stream.readexactly(_LEN.size)
    (n,) = _LEN.unpack(prefix)
    return prefix, (None if n > limit else await stream.readexactly(n))


class RecordCheck:
    """The record headers of a batch-get stream that answers ``keys``, checked one at a time:
    exactly one record per key, in their order, then the end record counting them."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = keys
        self.count = 0

    def record(self, doc: Any) -> tuple[str, int | None] | None:
        """(key, length or None for a miss) of the record whose header is ``doc``; None for
        the end record. Raises ValueError on a malformed or unexpected record."""
        if not isinstance(doc, dict):
            raise ValueError("record header is not an object")
        count, keys = self.count, self._keys
        if doc.get("end") is True:
            if doc.get("count") != count or count != len(keys):
                raise ValueError(f"end record counts {doc.get('count')}, {count} received "
                                 f"for {len(keys)} keys")
            return None
        key = doc.get("key")
        if count >= len(keys) or key != keys[count]:
            raise ValueError(f"record {count} is for key {key!r}, not the one asked")
        self.count += 1
        if doc.get("missing") is True:
            return key, None
        length = doc.get("length")
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise ValueError(f"record {count}: bad block length {length!r}")
        return key, length


def header_length(prefix: bytes | bytearray | memoryview, limit: int = MAX_HEADER) -> int:
    """The length a record header's prefix declares; ValueError past ``limit``."""
    (n,) = _LEN.unpack(prefix)
    if n > limit:
        raise ValueError(f"record header of {n} bytes")
    return int(n)


def header_doc(data: bytes | bytearray | memoryview) -> Any:
    """A record header's JSON; ValueError if it is not JSON (or nests too deep to parse)."""
    try:
        return json.loads(bytes(data))
    except RecursionError:
        raise ValueError("record header nested too deep") from None
