"""The native API under /v1: what S3 lacks, for inference connectors.

- ``PUT  /v1/{ns}``            create the namespace unless it exists -> {"created": bool}
- ``POST /v1/{ns}/lookup``     JSON {"keys": [...]} -> {"prefix": n, "present": [bool, ...]}
- ``POST /v1/{ns}/batch-get``  JSON {"keys": [...]} -> framed blocks (below)
- ``POST /v1/{ns}/locate``     JSON {"keys": [...]} -> {"expires": t, "urls": [...], "blocks":
  [null | "gateway" | [url index, offset, length, crc], ...]}: where a client may read each
  block itself (``--direct-reads``, else 501 NotImplemented; store/locate.py); "gateway" for
  every block when the caller's credential is limited to some namespaces
- ``POST /v1/{ns}/batch-put``  framed blocks -> {"stored": n}  (``x-s3kv-durability: sealed``);
  a 503 SlowDown says in ``x-s3kv-stored`` how many leading blocks were stored before it
- ``POST /v1/{ns}/delete``     JSON {"keys": [...]} -> {"deleted": n}
- ``POST /v1/{ns}/list``       JSON {"prefix": P, "after": K, "limit": n} -> {"keys": [...],
  "truncated": bool}
- ``POST /v1/flush``           seal open segments now -> {"sealed": true}
- ``GET  /v1/stats``           store counters -> JSON

Bodies: batch-put takes ``application/x-s3kv-frames`` (lengths first); batch-get answers
``application/x-s3kv-stream``, one record per key sent as soon as that block is read and
verified (s3kv/frames.py, docs/api.md).
"""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from typing import Any

from aiohttp import web

from s3kv.errors import NamespaceExists, RequestError, S3KVError
from s3kv.frames import (
    HEAD_ALLOWANCE,
    STREAM,
    block_record,
    decode_frames,
    end_record,
    read_head,
)
from s3kv.gateway import ops
from s3kv.gateway.access import check_namespace, require_unrestricted
from s3kv.gateway.bodies import Body, Destination, read_body, read_small
from s3kv.gateway.chunked import ChunkSender
from s3kv.gateway.reqkeys import AUTH, OP
from s3kv.gateway.requests import codec_of, durability, validate_key
from s3kv.gateway.s3_buckets import RESERVED
from s3kv.gateway.state import GatewayState, state_of
from s3kv.store.blocksums import RunningSums
from s3kv.store.codecs import HEADER_CODEC, CodecSpec
from s3kv.store.landing import Landing
from s3kv.store.store import BlockMeta
from s3kv.store.unverified import Unverified
from s3kv.wire.blocksend import Sender
from s3kv.wire.body import pieces_of, size_of
from s3kv.wire.headers import index_headers

MAX_BATCH_KEYS = 4096
#: unchecked blocks (lent by the backend: at hand) at most checked and sent in one go, and
#: their bytes (wire/blocksend.py)
SEND_RUN = 64
SEND_RUN_BYTES = 16 * 1024 * 1024


def _keys(doc: Any) -> list[str]:
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise RequestError("InvalidArgument", 'expected JSON {"keys": ["...", ...]}')
    if len(keys) > MAX_BATCH_KEYS:
        raise RequestError("InvalidArgument", f"at most {MAX_BATCH_KEYS} keys per request")
    return keys


async def _json(request: web.Request, st: GatewayState) -> Any:
    try:
        return json.loads(await read_small(request, st))
    except (ValueError, UnicodeDecodeError, RecursionError):  # too deeply nested to parse
        raise RequestError("InvalidArgument", "the body is not valid JSON") from None


def _auth(request: web.Request) -> GatewayState:
    """Authenticate; on /v1/{ns}/... also check the caller may use that namespace, and on the
    store-wide endpoints (flush, stats) that it is unrestricted."""
    st = state_of(request)
    raw_path, _, raw_query = request.raw_path.partition("?")
    request[AUTH] = ops.authenticate(request, st, raw_path, raw_query)
    ns = request.match_info.get("ns")
    if ns is None:
        require_unrestricted(ops.caller(request))
    else:
        check_namespace(ops.caller(request), ns)
    return st


async def lookup(request: web.Request) -> web.StreamResponse:
    request[OP] = "NativeLookup"
    st = _auth(request)
    ns = request.match_info["ns"]
    keys = [validate_key(k) for k in _keys(await _json(request, st))]
    leading, present = st.store.prefix_lookup(ns, keys)
    return web.json_response({"prefix": leading, "present": present})


async def batch_get(request: web.Request) -> web.StreamResponse:
    request[OP] = "NativeBatchGet"
    st = _auth(request)
    ns = request.match_info["ns"]
    names = _keys(await _json(request, st))
    keys = [validate_key(k) for k in names]
    # blocks lent by the backend come unchecked where a compiled loop checks them as it sends
    blocks = (st.store.iter_many(ns, keys) if st.sender is None  # both raise NoSuchBucket
              else st.store.iter_unverified(ns, keys))
    resp = web.StreamResponse(headers={"Content-Type": STREAM})
    resp.enable_chunked_encoding()  # the length is known only once every block is verified
    await resp.prepare(request)
    sender = ChunkSender(request, resp)
    await sender.start()
    sent = 0
    run = _Run(sender, st.sender)  # unchecked blocks, checked and sent together
    async with aclosing(blocks):
        names_left = iter(names)
        async for block in blocks:
            name = next(names_left)
            if isinstance(block, Unverified):
                if run.add(name, block):
                    sent += await run.send()
                continue
            sent += await run.send()
            size = None if block is None else size_of(block)
            record = block_record(name, size)
            if block is not None and size:
                await sender.write(record, pieces_of(block))
                sent += size
            else:
                await sender.write(record)
        sent += await run.send()
    await sender.write(end_record(len(names)))
    await resp.write_eof()
    st.metrics.bytes_out.inc(sent)
    st.metrics.bytes_out_compiled.inc(sender.compiled_bytes)
    return resp


class _Run:
    """Unchecked blocks (lent by the backend: at hand) gathered for one compiled call that
    checks and sends them (wire/blocksend.py); between runs other requests have the loop."""

    def __init__(self, sender: ChunkSender, compiled: Sender | None) -> None:
        self._sender = sender
        self._compiled = compiled
        self._blocks: list[tuple[str, Unverified]] = []
        self._bytes = 0

    def add(self, name: str, block: Unverified) -> bool:
        """Gather the block; whether the run is full (send it then)."""
        self._blocks.append((name, block))
        self._bytes += len(block.view)
        return len(self._blocks) >= SEND_RUN or self._bytes >= SEND_RUN_BYTES

    async def send(self) -> int:
        """The run's blocks, each checked before it is sent (a miss if it fails: the store
        forgets it); the bytes of blocks sent. The run is empty after."""
        run, self._blocks, self._bytes = self._blocks, [], 0
        if not run:
            return 0

        def bad(i: int) -> bytes:
            name, block = run[i]
            block.reject()
            return block_record(name, None)

        sent = await self._sender.write_checked(
            [block_record(n, len(b.view)) for n, b in run], [b.view for _, b in run],
            [b.crc for _, b in run], bad, self._compiled)
        await asyncio.sleep(0)
        return sent


async def locate(request: web.Request) -> web.StreamResponse:
    request[OP] = "NativeLocate"
    st = _auth(request)
    if not st.settings.direct_reads or not st.store.locator.possible:
        raise RequestError("NotImplemented", "Direct reads are off on this gateway: read the "
                           "blocks with batch-get (`s3kv serve --direct-reads SECONDS` on an "
                           "S3 backend turns them on).", 501)
    nid = st.store.ns_id(request.match_info["ns"])  # raises NoSuchBucket
    keys = [validate_key(k) for k in _keys(await _json(request, st))]
    # a segment holds blocks of several namespaces: its URL is for callers that may read all
    found = await st.store.locator.locate(nid, keys, st.settings.direct_reads,
                                          urls=ops.caller(request).unrestricted)
    return web.json_response({"expires": found.expires, "urls": found.urls,
                              "blocks": found.blocks})


async def batch_put(request: web.Request) -> web.StreamResponse:
    request[OP] = "NativeBatchPut"
    st = _auth(request)
    ns = request.match_info["ns"]
    st.store.ns_id(ns)
    durable = durability(request)
    heads = index_headers(request.headers)
    codec = codec_of(heads, st.store.namespace_codecs[ns])
    limit = min(st.settings.max_request_memory // 2,
                64 * st.settings.max_block_size + HEAD_ALLOWANCE)
    landing: Landing | None = None
    sums: RunningSums | None = None

    async def land(length: int) -> Destination:
        """Once the body's head says what its blocks are: their room in the open segment, to
        receive them straight into, checksummed as they arrive (store/landing.py)."""
        nonlocal landing, sums
        head, blocks = await read_head(request.content, length)
        if blocks is not None:
            try:
                landing = await st.store.land(ns, [(validate_key(k), n) for k, n in blocks],
                                              codec=codec)
            except S3KVError:  # the whole body is read, then refused or pushed back as usual
                landing = None
        if landing is None:
            return Destination(head, [])
        sums = st.sums.start(landing.lengths())
        return Destination(head, landing.spans(), sums)

    try:
        body = await read_body(request, st, limit, heads=heads, land=land)
        try:
            if landing is not None and sums is not None and body.landed:
                keys = [room.key for room in landing.rooms]
                stored = len(st.store.landed(landing, await sums.values()))
            else:
                keys, stored = await _put_framed(st, ns, body, codec)
        finally:
            st.budget.release(body.reserved)
    finally:
        if landing is not None:  # given up, unless committed
            landing.abandon()
    if durable:
        await st.store.wait_durable(ns, keys)
    return web.json_response({"stored": stored})


async def _put_framed(st: GatewayState, ns: str, body: Body, codec: CodecSpec | None
                      ) -> tuple[list[bytes], int]:
    """Store the blocks of a framed body read as it came: their keys, and how many were
    stored (Backpressure says how many, when the store pushed back part way)."""
    items = [(validate_key(k), d) for k, d in decode_frames(body.pieces)]
    for _, d in items:
        if size_of(d) > st.settings.max_block_size:
            raise RequestError("EntityTooLarge", "a block exceeds the max block size")
    return [k for k, _ in items], await st.store.put_many(ns, items, codec=codec)


async def create(request: web.Request) -> web.StreamResponse:
    request[OP] = "NativeCreate"
    st = _auth(request)
    ns = request.match_info["ns"]
    if ns in st.store.namespaces:
        return web.json_response({"created": False})
    if ns in RESERVED:
        raise RequestError("InvalidBucketName", f"{ns!r} is reserved by the gateway's "
                           "operations endpoints.")
    try:
        await st.store.create_namespace(ns, request.headers.get(HEADER_CODEC))
    except NamespaceExists:  # created meanwhile by a concurrent request
        return web.json_response({"created": False})
    return web.json_response({"created": True})


async def delete(request: web.Request) -> web.StreamResponse:
    request[OP] = "NativeDelete"
    st = _auth(request)
    ns = request.match_info["ns"]
    keys = [validate_key(k) for k in _keys(await _json(request, st))]
    st.store.ns_id(ns)  # raises NoSuchBucket before anything is deleted
    deleted = 0
    for k in keys:
        deleted += await st.store.delete(ns, k)
    return web.json_response({"deleted": deleted})


async def list_keys(request: web.Request) -> web.StreamResponse:
    request[OP] = "NativeList"
    st = _auth(request)
    ns = request.match_info["ns"]
    doc = await _json(request, st)
    if not isinstance(doc, dict):
        raise RequestError("InvalidArgument", 'expected JSON {"prefix": "", "limit": 1000}')
    prefix, after, limit = doc.get("prefix", ""), doc.get("after", ""), doc.get("limit", 1000)
    if not isinstance(prefix, str) or not isinstance(after, str) or not isinstance(limit, int) \
            or isinstance(limit, bool) or not 1 <= limit <= MAX_BATCH_KEYS:
        raise RequestError("InvalidArgument", "prefix and after are strings, limit is an "
                           f"integer in 1..{MAX_BATCH_KEYS}")
    try:  # JSON may carry lone surrogates ("\ud800"), which are no UTF-8
        start = prefix.encode(), after.encode()
    except UnicodeEncodeError:
        raise RequestError("InvalidArgument", "prefix and after must be valid UTF-8") from None
    metas, more = await st.store.list_blocks(ns, *start, limit)
    keys = [m.key.decode() for m in metas if isinstance(m, BlockMeta)]  # no delimiter: all
    return web.json_response({"keys": keys, "truncated": more})


async def flush(request: web.Request) -> web.StreamResponse:
    request[OP] = "NativeFlush"
    st = _auth(request)
    await st.store.flush()
    return web.json_response({"sealed": True})


async def stats(request: web.Request) -> web.StreamResponse:
    request[OP] = "NativeStats"
    st = _auth(request)
    return web.json_response(st.summary())


def add_routes(app: web.Application, expect_handler: Any = None) -> None:
    kw = {"expect_handler": expect_handler}
    app.router.add_post("/v1/flush", flush, **kw)
    app.router.add_get("/v1/stats", stats, **kw)
    app.router.add_put("/v1/{ns}", create, **kw)
    app.router.add_post("/v1/{ns}/lookup", lookup, **kw)
    app.router.add_post("/v1/{ns}/batch-get", batch_get, **kw)
    app.router.add_post("/v1/{ns}/batch-put", batch_put, **kw)
    app.router.add_post("/v1/{ns}/locate", locate, **kw)
    app.router.add_post("/v1/{ns}/delete", delete, **kw)
    app.router.add_post("/v1/{ns}/list", list_keys, **kw)
