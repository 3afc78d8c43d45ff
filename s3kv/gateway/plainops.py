"""The requests the plain lane (plainlane.py) serves, and their answers.

A request is *plain* when it is a path-style ``PUT`` or ``GET`` of one object with no query, on
HTTP/1.1, with only the headers in :data:`ALLOWED` (each once), a signature the verifier
accepts over ``UNSIGNED-PAYLOAD`` (a PUT) or an empty payload (a GET), a namespace the caller
may use that exists and stores blocks as they are, a valid key, and (a PUT) a body under the
landing's minimum (larger ones are received straight into their segment by the handlers,
store/landing.py) that the memory budget admits, on a gateway with ``--etag fast`` that is not
shutting down. For such a request the S3 handlers (app.py, s3_objects.py) would classify, check
and store exactly as :func:`store_put` and :func:`read_get` do, and answer as they answer;
anything else, and any check that fails, is left to them (:func:`plain_request` says None), so
every error answer but the store's own stays theirs. :func:`land_now`, :func:`put_now` and
:func:`get_now` are the same steps when they need no wait (None: ask the async ones).
"""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import NamedTuple
from urllib.parse import unquote

from aiohttp.http import SERVER_SOFTWARE

from s3kv.backends.base import lends_windows
from s3kv.errors import RequestError, S3KVError
from s3kv.gateway.access import ANONYMOUS, Credential, check_namespace
from s3kv.gateway.app import next_request_id
from s3kv.gateway.objattrs import ObjectAttrs, attrs_of, http_date, object_etag, response_headers
from s3kv.gateway.requests import validate_key
from s3kv.gateway.s3xml import XML, error_document
from s3kv.gateway.state import GatewayState
from s3kv.gateway.translate import to_request_error, unread
from s3kv.store.landing import LAND_MIN, Landing
from s3kv.store.layout import checksum
from s3kv.store.store import BlockMeta
from s3kv.wire.body import Buffer, Pieces, views_of
from s3kv.wire.headers import is_decimal

#: the headers a plain request may carry (lowercase); any other sends it to the S3 handlers
ALLOWED = frozenset({"host", "content-length", "authorization", "x-amz-date",
                     "x-amz-content-sha256", "user-agent", "accept", "accept-encoding",
                     "amz-sdk-invocation-id", "amz-sdk-request", "connection", "expect"})
UNSIGNED = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#: a plain PUT with at least this many bytes of its body still to come lands (:func:`land`)
LAND_LEAST = 64 * 1024
#: a plain PUT's attributes: no content header, no metadata, no checksum, the fast ETag
NO_ATTRS = ObjectAttrs()


class Plain(NamedTuple):
    """A plain request, checked as far as its head allows."""

    method: str  # "PUT" or "GET"
    bucket: str
    key: bytes
    path: str  # decoded (the S3 error document's Resource, as the S3 handlers give it)
    length: int  # a PUT's body, in bytes (reserved from the memory budget); 0 for a GET
    expect: bool = False  # Expect: 100-continue (answered before the body, as aiohttp does)

    @property
    def op(self) -> str:
        """Its S3 operation, as the request metrics name it."""
        return "PutObject" if self.method == "PUT" else "GetObject"


def _headers(lines: list[str]) -> dict[str, str] | None:
    """The head's header lines by lowercase name (the verifier looks names up as SigV4 signs
    them, lowercase; a request signed otherwise fails here and goes to the handlers)."""
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        name = name.lower()
        if not sep or name not in ALLOWED or name in headers:
            return None
        value = value.strip(" ")
        if not value.isprintable():
            return None
        headers[name] = value
    return headers


def _target(st: GatewayState, raw_path: str, host: str) -> tuple[str, str, str] | None:
    """(bucket, key, the decoded path) of a path-style request for one object."""
    domain = st.settings.domain.lower()
    if domain and host.split(":")[0].lower().endswith("." + domain):
        return None  # virtual-hosted style
    try:
        path = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        return None
    bucket, _, key = path[1:].partition("/")
    return (bucket, key, path) if bucket and key else None


def _caller(st: GatewayState, method: str, raw_path: str,
            headers: dict[str, str]) -> Credential | None:
    if st.verifier is None:
        return ANONYMOUS
    try:
        auth = st.verifier.verify(method, raw_path, "", headers, time.time())
    except RequestError:
        return None
    return st.credentials.get(auth.access_key)


def plain_request(st: GatewayState, head: bytes) -> Plain | None:
    """The request whose head (without its final blank line) is ``head``, if it is plain and
    passes every check the S3 handlers make before its body; None: theirs to answer. A plain
    PUT's body size is reserved from the memory budget: release it with :func:`release`."""
    if st.shutting_down or st.settings.etag != "fast":
        return None
    try:
        lines = head.decode("ascii").split("\r\n")
    except UnicodeDecodeError:
        return None
    method, _, rest = lines[0].partition(" ")
    raw_path, _, version = rest.partition(" ")
    if method not in ("PUT", "GET") or version != "HTTP/1.1" or not raw_path.startswith("/") \
            or "?" in raw_path or "#" in raw_path or " " in raw_path:
        return None
    headers = _headers(lines[1:])
    if headers is None or "host" not in headers \
            or headers.get("connection", "keep-alive").lower() != "keep-alive" \
            or headers.get("expect", "100-continue").lower() != "100-continue":
        return None
    length = headers.get("content-length", "0")
    sha = headers.get("x-amz-content-sha256", UNSIGNED)
    if not is_decimal(length):
        return None
    size = int(length)
    if (size == 0 or sha != UNSIGNED) if method == "PUT" \
            else (size != 0 or sha not in (UNSIGNED, EMPTY_SHA256)):
        return None
    target = _target(st, raw_path, headers["host"])
    if target is None or size > st.settings.max_block_size \
            or (method == "PUT" and size >= LAND_MIN):  # lands in its segment (the handlers)
        return None
    bucket, key, path = target
    caller = _caller(st, method, raw_path, headers)
    codec = st.store.namespace_codecs.get(bucket)
    if caller is None or codec is None or codec.name != "none":
        return None
    try:
        check_namespace(caller, bucket)
        stored_key = validate_key(key)
        if size:
            st.budget.reserve(size)
    except RequestError:
        return None
    return Plain(method, bucket, stored_key, path, size, "expect" in headers)


def release(st: GatewayState, plain: Plain) -> None:
    """Give back what :func:`plain_request` reserved for ``plain``'s body."""
    if plain.length:
        st.budget.release(plain.length)


def answer_head(status: int, headers: dict[str, str], rid: str, length: int) -> bytes:
    """A response's head, with the headers aiohttp's answers carry."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    lines.append(f"x-amz-request-id: {rid}\r\nContent-Length: {length}\r\n"
                 f"Date: {http_date(int(time.time()))}\r\nServer: {SERVER_SOFTWARE}\r\n\r\n")
    return "\r\n".join(lines).encode()


def error_answer(plain: Plain, err: RequestError, rid: str) -> bytes:
    body = error_document(err.code, str(err), plain.path, rid)
    headers = {**err.headers, "Content-Type": XML}
    return answer_head(err.status, headers, rid, len(body)) + body


def lands(st: GatewayState, plain: Plain, got: int) -> bool:
    """Whether a plain PUT whose first ``got`` bytes are in is to :func:`land`: most of its
    body still to come, on a backend that lends windows (the file backend)."""
    return plain.length - got >= LAND_LEAST and lends_windows(type(st.store.backend))


def land_now(st: GatewayState, plain: Plain) -> Landing | None:
    """:func:`land`'s room, if taking it needs no wait (the store's ``land_now``); None: ask
    that."""
    try:
        return st.store.land_now(plain.bucket, [(plain.key, plain.length)], least=LAND_LEAST)
    except S3KVError:
        return None


async def land(st: GatewayState, plain: Plain) -> Landing | None:
    """Room for a plain PUT's body in its segment, to receive it straight into (as PutObject's
    large bodies are, store/landing.py); None: receive it into a buffer and append it (no
    window here, or the store refuses: :func:`store_put` gives the store's answer)."""
    try:
        return await st.store.land(plain.bucket, [(plain.key, plain.length)], least=LAND_LEAST)
    except S3KVError:
        return None


#: a plain request's answer: its status, and its bytes (the head, then an object's views)
Answer = tuple[int, list[Buffer]]


def _received(st: GatewayState, body: bytearray | memoryview) -> tuple[str, int]:
    st.metrics.bytes_in.inc(len(body))  # received, as the S3 handlers count it
    return next_request_id(), checksum(body)


def _stored(rid: str, meta: BlockMeta) -> Answer:
    return 200, [answer_head(200, {"ETag": object_etag(meta, NO_ATTRS)}, rid, 0)]


def _refused(plain: Plain, rid: str, exc: S3KVError) -> Answer:
    err = to_request_error(exc)
    return err.status, [error_answer(plain, err, rid)]


def put_now(st: GatewayState, plain: Plain, body: bytearray | memoryview,
            landing: Landing | None) -> Answer | None:
    """:func:`store_put`'s answer when it needs no wait: a body landed in its segment, for a
    key whose lock no one holds (committed at once, as under the lock); None: ask that."""
    if landing is None or not st.key_locks.free(plain.bucket, plain.key):
        return None
    rid, crc = _received(st, body)
    try:
        [meta] = st.store.landed(landing, [crc])
    except S3KVError as exc:
        return _refused(plain, rid, exc)
    return _stored(rid, meta)


async def store_put(st: GatewayState, plain: Plain, body: bytearray | memoryview,
                    landing: Landing | None = None) -> Answer:
    """Store a plain PUT's body as PutObject does, received into ``landing``'s window if it has
    one; (status, the whole answer)."""
    rid, crc = _received(st, body)
    try:
        async with st.key_locks.hold(plain.bucket, plain.key):
            if landing is not None:
                [meta] = st.store.landed(landing, [crc])
            else:
                meta = await st.store.put(plain.bucket, plain.key, [body], crc=crc)
    except S3KVError as exc:
        return _refused(plain, rid, exc)
    return _stored(rid, meta)


def _headers_of(meta: BlockMeta) -> dict[str, str] | None:
    headers = response_headers(meta, attrs_of(meta), {}, checksum=False)
    return None if any("\r" in v or "\n" in v for v in headers.values()) else headers


def _object(st: GatewayState, plain: Plain, rid: str, meta: BlockMeta | None,
            headers: dict[str, str], data: Pieces | None) -> Answer:
    if meta is None or data is None:  # absent (404), or unread since the head: as GetObject
        err = unread(meta is not None and st.store.head(plain.bucket, plain.key) is not None)
        return err.status, [error_answer(plain, err, rid)]
    st.metrics.bytes_out.inc(meta.size)
    return 200, [answer_head(200, headers, rid, meta.size), *views_of(data, 0, meta.size)]


def get_now(st: GatewayState, plain: Plain, most: int) -> Answer | None:
    """:func:`read_get`'s answer when it needs no wait (a miss, or an object of at most
    ``most`` bytes at hand: ``BlockStore.read_now``); None: ask that."""
    meta = st.store.head(plain.bucket, plain.key)
    if meta is None:
        return _object(st, plain, next_request_id(), None, {}, None)
    headers = _headers_of(meta)
    data = None if headers is None or meta.size > most \
        else st.store.read_now(plain.bucket, plain.key)
    return None if data is None or headers is None \
        else _object(st, plain, next_request_id(), meta, headers, data)


async def read_get(st: GatewayState, plain: Plain) -> Answer | None:
    """A plain GET's answer, as GetObject gives it: (status, its head and the object's bytes,
    as views); a missing object is 404 NoSuchKey. None: the object's attributes cannot go into
    a head as they are (the S3 handlers answer it)."""
    rid = next_request_id()
    meta = st.store.head(plain.bucket, plain.key)
    data, headers = None, {}
    if meta is not None:
        if (got := _headers_of(meta)) is None:
            return None
        headers, data = got, await st.store.read(plain.bucket, plain.key)
    return _object(st, plain, rid, meta, headers, data)
