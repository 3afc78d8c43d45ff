"""Request bodies: what boto3 really sends (captured), AWS's signed-chunk example, and failures."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import socket
import zlib
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import boto3
import pytest
from aiohttp import StreamReader, web
from botocore.config import Config
from multidict import CIMultiDict

from s3kv.errors import RequestError
from s3kv.gateway.checksums import _CRC32C, _CRC64NVME, new_checksum
from s3kv.gateway.objattrs import stored_content_encoding
from s3kv.gateway.payload import BodyReader
from s3kv.wire.headers import index_headers
from s3kv.wire.sigv4 import PayloadMode
from s3kv.wire.sigv4_verify import AuthContext, SigV4Verifier

AK, SK = "AKIDS3KVTEST", "s3kv-secret"
MAX = 8 * 1024 * 1024

# AWS's published example for STREAMING-AWS4-HMAC-SHA256-PAYLOAD (66560 bytes of "a").
SPEC_AK, SPEC_SK = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SPEC_HEADERS = {
    "Host": "s3.amazonaws.com", "x-amz-date": "20130524T000000Z",
    "x-amz-storage-class": "REDUCED_REDUNDANCY",
    "Authorization": f"AWS4-HMAC-SHA256 Credential={SPEC_AK}/20130524/us-east-1/s3/aws4_request,"
    "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
    "x-amz-decoded-content-length;x-amz-storage-class,"
    "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
    "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "Content-Encoding": "aws-chunked",
    "x-amz-decoded-content-length": "66560", "Content-Length": "66824",
}
SPEC_BODY = (
    b"10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n"
    + b"a" * 65536 + b"\r\n"
    + b"400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n"
    + b"a" * 1024 + b"\r\n"
    + b"0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n")


def spec_context() -> AuthContext:
    return SigV4Verifier({SPEC_AK: SPEC_SK}).verify(
        "PUT", "/examplebucket/chunkObject.txt", "", CIMultiDict(SPEC_HEADERS),
        datetime(2013, 5, 24, 0, 1, tzinfo=UTC))


def stream_of(data: bytes, eof: bool = True) -> StreamReader:
    s = StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())
    s.feed_data(data)
    if eof:
        s.feed_eof()
    return s


async def read(data: bytes, headers: Mapping[str, str], auth: AuthContext | None = None,
               **kw: Any) -> tuple[bytes, Any]:
    reader = BodyReader(stream_of(data), index_headers(CIMultiDict(headers)), auth,
                        **{"max_size": MAX, **kw})
    pieces = [p async for p in reader]
    return b"".join(pieces), await reader.verify()


async def code_of(data: bytes, headers: Mapping[str, str], auth: AuthContext | None = None,
                  **kw: Any) -> str:
    with pytest.raises(RequestError) as info:
        await read(data, headers, auth, **kw)
    return info.value.code


# -- AWS's signed-chunk example ---------------------------------------------------------------

async def test_spec_signed_chunks_decode_and_verify() -> None:
    body, result = await read(SPEC_BODY, SPEC_HEADERS, spec_context(), piece_size=4096)
    assert body == b"a" * 66560 and result.size == 66560
    assert result.md5_hex == hashlib.md5(body).hexdigest()


async def test_spec_tampered_chunk_and_signature() -> None:
    tampered_data = SPEC_BODY.replace(b"a" * 1024, b"b" + b"a" * 1023)
    assert await code_of(tampered_data, SPEC_HEADERS, spec_context()) == "SignatureDoesNotMatch"
    tampered_sig = SPEC_BODY.replace(b"ad80c730", b"ad80c731")
    assert await code_of(tampered_sig, SPEC_HEADERS, spec_context()) == "SignatureDoesNotMatch"
    no_sig = SPEC_BODY.replace(b"400;chunk-signature=", b"400;x=")
    assert await code_of(no_sig, SPEC_HEADERS, spec_context()) == "InvalidRequest"
    assert await code_of(SPEC_BODY[:40000], SPEC_HEADERS, spec_context()) == "IncompleteBody"
    assert await code_of(SPEC_BODY[:-60], SPEC_HEADERS, spec_context()) == "IncompleteBody"


async def test_non_ascii_signatures_are_mismatches_not_crashes() -> None:
    """A stray byte in a chunk or trailer signature is SignatureDoesNotMatch (it was a TypeError
    from hmac.compare_digest on non-ASCII str, i.e. a 500; found by the fuzz suite)."""
    odd_chunk = SPEC_BODY.replace(b"ad80c730", b"ad80c73\x80", 1)
    assert await code_of(odd_chunk, SPEC_HEADERS, spec_context()) == "SignatureDoesNotMatch"
    ctx, data, crc, headers = _trailer_request(100)
    good = _signed_trailer_body(ctx, data, ("x-amz-checksum-crc32", crc))
    head, _, sig = good.rstrip(b"\r\n").rpartition(b"x-amz-trailer-signature:")
    odd_trailer = head + b"x-amz-trailer-signature:\xe9" + sig[1:] + b"\r\n\r\n"
    assert await code_of(odd_trailer, headers, ctx) == "SignatureDoesNotMatch"


def _trailer_request(size: int) -> tuple[AuthContext, bytes, str, dict[str, str]]:
    """A signed-trailer upload of ``size`` random bytes: context, data, its CRC32, headers."""
    ctx = spec_context()
    ctx = ctx._replace(payload_mode=PayloadMode.STREAMING_SIGNED_TRAILER)
    data = os.urandom(size)
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    headers = {"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
               "Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(size),
               "x-amz-trailer": "x-amz-checksum-crc32"}
    return ctx, data, crc, headers


def _signed_trailer_body(ctx: AuthContext, data: bytes, trailer: tuple[str, str],
                         chunk: int = 3000) -> bytes:
    """STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER framing, signed as the S3 docs describe."""
    def sign(kind: str, prev: str, digest: str) -> str:
        sts = f"{kind}\n{ctx.amz_date}\n{ctx.scope}\n{prev}\n{digest}"
        return hmac.new(ctx.signing_key, sts.encode(), hashlib.sha256).hexdigest()

    out, prev = b"", ctx.seed_signature
    empty = hashlib.sha256(b"").hexdigest()
    for piece in [data[i:i + chunk] for i in range(0, len(data), chunk)] + [b""]:
        prev = sign("AWS4-HMAC-SHA256-PAYLOAD", prev,
                    f"{empty}\n{hashlib.sha256(piece).hexdigest()}")
        out += b"%x;chunk-signature=%s\r\n" % (len(piece), prev.encode())
        out += piece + b"\r\n" if piece else b""
    canonical = f"{trailer[0]}:{trailer[1]}\n".encode()
    tsig = sign("AWS4-HMAC-SHA256-TRAILER", prev, hashlib.sha256(canonical).hexdigest())
    return out + f"{trailer[0]}:{trailer[1]}\r\nx-amz-trailer-signature:{tsig}\r\n\r\n".encode()


async def test_signed_trailer_mode() -> None:
    ctx, data, crc, headers = _trailer_request(10000)
    body, result = await read(_signed_trailer_body(ctx, data, ("x-amz-checksum-crc32", crc)),
                              headers, ctx)
    assert body == data and result.checksums == {"crc32": crc}
    good = _signed_trailer_body(ctx, data, ("x-amz-checksum-crc32", crc))
    forged = good.replace(crc.encode(), b"AAAAAA==")
    assert await code_of(forged, headers, ctx) == "SignatureDoesNotMatch"
    wrong = _signed_trailer_body(ctx, data, ("x-amz-checksum-crc32", "AAAAAA=="))
    assert await code_of(wrong, headers, ctx) == "BadDigest"


# -- what boto3 sends ---------------------------------------------------------------------------

def _client(endpoint: str, **cfg: Any) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=AK,
                        aws_secret_access_key=SK, region_name="us-east-1",
                        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}, **cfg))


def _capture_https_put(**params: Any) -> tuple[dict[str, str], bytes, str, str]:
    """What boto3 would send over TLS (the trailer mode), taken before it leaves the process."""
    from botocore.awsrequest import AWSResponse

    s3 = _client("https://s3.example.test")
    seen: dict[str, Any] = {}

    def before_send(request: Any, **_: Any) -> AWSResponse:
        body = request.body
        seen["body"] = body.read() if hasattr(body, "read") else bytes(body or b"")
        seen["headers"] = {k: v.decode() if isinstance(v, bytes) else v
                           for k, v in request.headers.items()}
        seen["url"] = request.url
        raw = mock.Mock(stream=lambda **_: iter([b""]))
        return AWSResponse(request.url, 200, {"ETag": '"x"'}, raw)

    s3.meta.events.register("before-send.s3", before_send)
    s3.put_object(Bucket="bkt", Key="k", **params)
    from urllib.parse import urlsplit

    parts = urlsplit(seen["url"])
    return seen["headers"], seen["body"], parts.path, parts.query


@pytest.mark.parametrize("algorithm", [None, "SHA256", "SHA1", "CRC32"])
async def test_boto3_https_trailer_body(algorithm: str | None) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    extra = {"ChecksumAlgorithm": algorithm} if algorithm else {}
    headers, raw, path, query = await asyncio.to_thread(_capture_https_put, Body=data, **extra)
    h = CIMultiDict(headers)
    h["Host"] = "s3.example.test"
    assert h["x-amz-content-sha256"] == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    algo = (algorithm or "CRC32").lower()
    assert h["x-amz-trailer"] == f"x-amz-checksum-{algo}"
    ctx = SigV4Verifier({AK: SK}).verify("PUT", path, query, h, datetime.now(UTC))
    reader = BodyReader(stream_of(raw), index_headers(h), ctx, max_size=MAX)
    assert b"".join([p async for p in reader]) == data
    result = await reader.verify()
    assert algo in result.checksums and result.etag == f'"{hashlib.md5(data).hexdigest()}"'
    tail = raw.rsplit(b"x-amz-checksum-", 1)[1]
    wrong = raw.replace(tail, tail[: tail.index(b":") + 1] + base64.b64encode(
        b"\0" * len(base64.b64decode(tail.split(b":")[1].strip()))) + b"\r\n\r\n")
    assert await code_of(wrong, h, ctx) == "BadDigest"
    assert await code_of(raw[: len(raw) // 2], h, ctx) == "IncompleteBody"
    assert await code_of(raw, h, ctx, max_size=1024 * 1024) == "EntityTooLarge"
    no_length = h.copy()
    del no_length["x-amz-decoded-content-length"]
    assert await code_of(raw, no_length, ctx, max_size=1024 * 1024) == "EntityTooLarge"


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A tiny aiohttp server that verifies and reads each PUT the way the gateway will."""
    records: list[dict[str, Any]] = []
    verifier = SigV4Verifier({AK: SK})

    async def handler(request: web.Request) -> web.Response:
        rec: dict[str, Any] = {"headers": dict(request.headers)}
        records.append(rec)
        try:
            path, _, query = request.raw_path.partition("?")
            ctx = verifier.verify(request.method, path, query, request.headers,
                                  datetime.now(UTC))
            reader = BodyReader(request.content, index_headers(request.headers), ctx, max_size=MAX)
            rec["body"] = b"".join([p async for p in reader])
            result = await reader.verify()
        except RequestError as exc:
            rec["error"] = exc.code
            rec["cause"] = repr(exc.__cause__)
            return web.Response(status=exc.status, text=exc.code)
        rec["mode"], rec["result"] = ctx.payload_mode, result
        return web.Response(headers={"ETag": result.etag or ""})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)  # handler_cancellation=False, as web.run_app defaults
    await runner.setup()
    site = web.SockSite(runner, socket.create_server(("127.0.0.1", 0)))
    await site.start()
    try:
        yield site.name, records
    finally:
        await runner.cleanup()


async def test_boto3_plain_http_put_and_upload_part(
        recorder: tuple[str, list[dict[str, Any]]]) -> None:
    endpoint, records = recorder
    s3 = _client(endpoint)
    data = os.urandom(256 * 1024)
    resp = await asyncio.to_thread(s3.put_object, Bucket="bkt", Key="a/b c", Body=data)
    assert resp["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    rec = records[-1]
    assert rec["body"] == data and rec["mode"] is PayloadMode.SIGNED
    assert rec["headers"]["x-amz-sdk-checksum-algorithm"] == "CRC32"
    assert rec["result"].checksums == {"crc32": rec["headers"]["x-amz-checksum-crc32"]}
    await asyncio.to_thread(s3.upload_part, Bucket="bkt", Key="k", UploadId="u1", PartNumber=2,
                            Body=data, ContentMD5=base64.b64encode(
                                hashlib.md5(data).digest()).decode())
    assert records[-1]["body"] == data and records[-1]["mode"] is PayloadMode.SIGNED
    url = await asyncio.to_thread(s3.generate_presigned_url, "put_object",
                                  Params={"Bucket": "bkt", "Key": "p"})
    import aiohttp

    async with aiohttp.ClientSession() as session, session.put(url, data=data) as r:
        assert r.status == 200
    assert records[-1]["body"] == data
    assert [r["mode"] for r in records] == [PayloadMode.SIGNED, PayloadMode.SIGNED,
                                            PayloadMode.UNSIGNED]


async def test_client_disconnect_mid_body(recorder: tuple[str, list[dict[str, Any]]]) -> None:
    endpoint, records = recorder
    s3 = _client(endpoint)
    url = await asyncio.to_thread(s3.generate_presigned_url, "put_object",
                                  Params={"Bucket": "bkt", "Key": "p"})
    target = url.split("127.0.0.1:", 1)[1]
    port, _, rest = target.partition("/")
    sock = socket.create_connection(("127.0.0.1", int(port)))
    sock.sendall(f"PUT /{rest} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                 "Content-Length: 100000\r\n\r\n".encode() + b"x" * 1000)
    await asyncio.sleep(0.2)
    sock.close()
    for _ in range(50):
        if records and "error" in records[-1]:
            break
        await asyncio.sleep(0.05)
    assert records[-1].get("error") == "IncompleteBody", records[-1]


# -- digests and limits ------------------------------------------------------------------------

async def test_plain_body_digests_and_limits() -> None:
    data = os.urandom(5 * 1024 * 1024 + 3)
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    sha = hashlib.sha256(data).hexdigest()
    base = {"Content-Length": str(len(data)), "x-amz-content-sha256": sha, "Content-MD5": md5}
    body, result = await read(data, base)
    assert body == data and result.size == len(data)
    assert await code_of(data[:-1] + bytes([data[-1] ^ 1]), base) == "XAmzContentSHA256Mismatch"
    assert await code_of(data, {**base, "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
                                "Content-MD5": base64.b64encode(b"0" * 16).decode()}) \
        == "BadDigest"
    assert await code_of(data, {**base, "Content-MD5": "bm90LWFuLW1kNQ=="}) == "InvalidDigest"
    assert await code_of(data, base, max_size=len(data) - 1) == "EntityTooLarge"
    assert await code_of(data[:100], base) == "IncompleteBody"
    unsized = {"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}
    assert (await read(data, unsized))[0] == data
    assert await code_of(data, unsized, max_size=1024) == "EntityTooLarge"


@pytest.mark.parametrize("algo", ["crc32", "crc32c", "crc64nvme", "sha1", "sha256"])
async def test_checksum_headers(algo: str) -> None:
    data = os.urandom(300_001)
    c = new_checksum(algo)
    c.update(data)
    value = base64.b64encode(c.digest()).decode()
    h = {"Content-Length": str(len(data)), f"x-amz-checksum-{algo}": value,
         "x-amz-sdk-checksum-algorithm": algo.upper()}
    assert (await read(data, h))[1].checksums == {algo: value}
    bad = base64.b64encode(bytes(len(c.digest()))).decode()
    assert await code_of(data, {**h, f"x-amz-checksum-{algo}": bad}) == "BadDigest"
    assert await code_of(data, {**h, f"x-amz-checksum-{algo}": "xx"}) == "InvalidRequest"


async def test_header_conflicts() -> None:
    h = {"Content-Length": "1", "x-amz-checksum-crc32": "AAAAAA==",
         "x-amz-checksum-sha1": base64.b64encode(bytes(20)).decode()}
    assert await code_of(b"x", h) == "InvalidRequest"
    assert await code_of(b"x", {"Content-Length": "1", "x-amz-sdk-checksum-algorithm": "CRC32"}) \
        == "InvalidRequest"
    assert await code_of(b"x", {"Content-Length": "1", "Content-Encoding": "aws-chunked"}) \
        == "InvalidRequest"
    assert await code_of(b"x", {"Content-Length": "-1"}) == "InvalidArgument"
    assert stored_content_encoding(index_headers({"Content-Encoding": "gzip,aws-chunked"})) \
        == "gzip"


def test_numpy_crcs_match_reference() -> None:
    for model, check in ((_CRC32C, 0xE3069283), (_CRC64NVME, 0xAE8B14860A799888)):
        assert model._raw_scalar(model.mask, b"123456789") ^ model.mask == check
        data = os.urandom(70_001)
        ref = model._raw_scalar(model.mask, data)
        assert model.update(model.mask, data, lanes=256) == ref
        reg = model.mask
        for i in range(0, len(data), 9999):
            reg = model.update(reg, data[i:i + 9999], lanes=64)
        assert reg == ref


async def collected(data: bytes, headers: Mapping[str, str], **kw: Any) -> tuple[bytes, Any, int]:
    """``BodyReader.collect`` (what the gateway reads bodies with): payload, result, progress
    calls."""
    reader = BodyReader(stream_of(data), index_headers(CIMultiDict(headers)), None,
                        **{"max_size": MAX, **kw})
    calls: list[None] = []
    pieces = await reader.collect(lambda: calls.append(None))
    return b"".join(pieces), await reader.verify(), len(calls)


@pytest.mark.parametrize("offload", [1 << 20, 64 << 20])  # batches spilled to a thread, or not
async def test_collect_reads_a_plain_body_as_iterating_does(offload: int) -> None:
    data = os.urandom(5 * 1024 * 1024 + 3)
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    crc = new_checksum("crc32")
    crc.update(data)
    base = {"Content-Length": str(len(data)), "Content-MD5": md5,
            "x-amz-checksum-crc32": base64.b64encode(crc.digest()).decode()}
    body, result, calls = await collected(data, base, offload_bytes=offload)
    assert body == data and result.size == len(data) and calls >= 1
    assert result.md5_hex == hashlib.md5(data).hexdigest() and "crc32" in result.checksums
    for bad, code in ((data[:100], "IncompleteBody"),
                      (data[:-1] + bytes([data[-1] ^ 1]), "BadDigest")):
        with pytest.raises(RequestError) as info:
            await collected(bad, base, offload_bytes=offload)
        assert info.value.code == code
    with pytest.raises(RequestError) as info:
        await collected(data, base, max_size=len(data) - 1)
    assert info.value.code == "EntityTooLarge"
    # unsized and aws-chunked bodies are collected through the iterator
    assert (await collected(data, {"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}))[0] == data
