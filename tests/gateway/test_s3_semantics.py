"""S3 object semantics against a running gateway, with boto3 over HTTP: MD5 ETags identical in
every answer, metadata and content headers, response-* overrides, conditional GET/PUT/DELETE,
put-if-absent under concurrency, stored flexible checksums, partNumber, a repeated
CompleteMultipartUpload, and all of it surviving a restart."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import zlib
from email.utils import formatdate
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.gateway.conftest import (
    GW_ACCESS,
    GW_SECRET,
    Gateway,
    gateway_client,
)
from tests.support.s3server import REGION

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def gateway(multipart_gateway: Gateway) -> Gateway:
    """This module's gateway (it replaces conftest's): multipart objects of a few parts."""
    return multipart_gateway


def _status(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str]:
    resp = exc.value.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"]["Code"]


def _md5(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


def _multipart(s3: Any, bucket: str, key: str, parts: list[bytes], **create: Any) -> Any:
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)
    done = []
    for n, data in enumerate(parts, start=1):
        extra = {"ChecksumAlgorithm": create["ChecksumAlgorithm"]} if "ChecksumAlgorithm" in \
            create else {}
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"], PartNumber=n,
                           Body=data, **extra)
        part = {"PartNumber": n, "ETag": r["ETag"]}
        for field in ("ChecksumCRC32", "ChecksumSHA256", "ChecksumCRC32C", "ChecksumSHA1"):
            if field in r:
                part[field] = r[field]
        done.append(part)
    return up, done


def test_etag_is_md5_in_every_answer(gw_s3: Any, gw_bucket: str) -> None:
    data = os.urandom(200_000)
    put = gw_s3.put_object(Bucket=gw_bucket, Key="one", Body=data)
    assert put["ETag"] == _md5(data)
    assert gw_s3.head_object(Bucket=gw_bucket, Key="one")["ETag"] == _md5(data)
    assert gw_s3.get_object(Bucket=gw_bucket, Key="one")["ETag"] == _md5(data)
    listed = gw_s3.list_objects_v2(Bucket=gw_bucket)["Contents"]
    assert [(o["Key"], o["ETag"]) for o in listed] == [("one", _md5(data))]

    parts = [os.urandom(5 * MiB), os.urandom(1000)]
    up, done = _multipart(gw_s3, gw_bucket, "multi", parts)
    assert [d["ETag"] for d in done] == [_md5(p) for p in parts]
    fin = gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="multi", UploadId=up["UploadId"],
                                          MultipartUpload={"Parts": done})
    want = '"' + hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + '-2"'
    assert fin["ETag"] == want
    assert gw_s3.head_object(Bucket=gw_bucket, Key="multi")["ETag"] == want
    assert gw_s3.get_object(Bucket=gw_bucket, Key="multi")["ETag"] == want
    listed = {o["Key"]: o["ETag"] for o in gw_s3.list_objects_v2(Bucket=gw_bucket)["Contents"]}
    assert listed["multi"] == want

    # a repeated Complete (a client retry) gets the same answer
    again = gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="multi",
                                            UploadId=up["UploadId"],
                                            MultipartUpload={"Parts": done})
    assert again["ETag"] == want and again["Key"] == "multi"
    with pytest.raises(ClientError) as exc:  # the same upload id under another key: unknown
        gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="other", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": done})
    assert _status(exc) == (404, "NoSuchUpload")


def test_metadata_content_headers_and_overrides(gw_s3: Any, gw_bucket: str) -> None:
    expires = formatdate(2_000_000_000, usegmt=True)
    gw_s3.put_object(Bucket=gw_bucket, Key="doc", Body=b"<p>hi</p>", ContentType="text/html",
                     CacheControl="max-age=60", ContentDisposition='attachment; filename="a"',
                     ContentEncoding="identity", ContentLanguage="de", Expires=expires,
                     Metadata={"model": "llama-3-8b", "Layer": "12"})
    for resp in (gw_s3.head_object(Bucket=gw_bucket, Key="doc"),
                 gw_s3.get_object(Bucket=gw_bucket, Key="doc")):
        assert resp["ContentType"] == "text/html"
        assert resp["CacheControl"] == "max-age=60"
        assert resp["ContentDisposition"] == 'attachment; filename="a"'
        assert resp["ContentEncoding"] == "identity"
        assert resp["ContentLanguage"] == "de"
        assert resp["ResponseMetadata"]["HTTPHeaders"]["expires"] == expires
        assert resp["Metadata"] == {"model": "llama-3-8b", "layer": "12"}
    got = gw_s3.get_object(Bucket=gw_bucket, Key="doc", ResponseContentType="text/plain",
                           ResponseCacheControl="no-cache", ResponseContentLanguage="fr",
                           ResponseContentDisposition="inline",
                           ResponseContentEncoding="gzip", ResponseExpires=expires)
    assert got["ContentType"] == "text/plain"
    assert got["CacheControl"] == "no-cache"
    assert got["ContentLanguage"] == "fr"
    assert got["ContentDisposition"] == "inline"
    assert got["ContentEncoding"] == "gzip"
    assert got["Body"].read() == b"<p>hi</p>"
    # the override is per request: the stored headers are unchanged
    assert gw_s3.head_object(Bucket=gw_bucket, Key="doc")["ContentType"] == "text/html"
    # no Content-Type sent: S3's default
    gw_s3.put_object(Bucket=gw_bucket, Key="plain", Body=b"x")
    assert gw_s3.head_object(Bucket=gw_bucket, Key="plain")["ContentType"] == \
        "binary/octet-stream"

    # user metadata over 2 KiB: MetadataTooLarge, nothing stored
    with pytest.raises(ClientError) as exc:
        gw_s3.put_object(Bucket=gw_bucket, Key="big-meta", Body=b"x",
                         Metadata={"a": "v" * 1500, "b": "w" * 1000})
    assert _status(exc) == (400, "MetadataTooLarge")
    with pytest.raises(ClientError):
        gw_s3.head_object(Bucket=gw_bucket, Key="big-meta")

    # multipart objects keep what CreateMultipartUpload declared
    up, done = _multipart(gw_s3, gw_bucket, "mp-doc", [b"abc"], ContentType="text/csv",
                          Metadata={"rows": "3"})
    gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="mp-doc", UploadId=up["UploadId"],
                                    MultipartUpload={"Parts": done})
    head = gw_s3.head_object(Bucket=gw_bucket, Key="mp-doc")
    assert head["ContentType"] == "text/csv" and head["Metadata"] == {"rows": "3"}


def test_conditional_get_and_head(gw_s3: Any, gw_bucket: str) -> None:
    gw_s3.put_object(Bucket=gw_bucket, Key="c", Body=b"conditional")
    head = gw_s3.head_object(Bucket=gw_bucket, Key="c")
    etag, modified = head["ETag"], head["LastModified"]
    before = formatdate(modified.timestamp() - 3600, usegmt=True)
    after = formatdate(modified.timestamp() + 3600, usegmt=True)
    assert gw_s3.get_object(Bucket=gw_bucket, Key="c", IfMatch=etag)["Body"].read() == \
        b"conditional"
    for call in (gw_s3.get_object, gw_s3.head_object):
        with pytest.raises(ClientError) as exc:
            call(Bucket=gw_bucket, Key="c", IfMatch='"0000"')
        assert _status(exc)[0] == 412
        with pytest.raises(ClientError) as exc:
            call(Bucket=gw_bucket, Key="c", IfNoneMatch=etag)
        assert _status(exc)[0] == 304
        with pytest.raises(ClientError) as exc:
            call(Bucket=gw_bucket, Key="c", IfModifiedSince=after)
        assert _status(exc)[0] == 304
        with pytest.raises(ClientError) as exc:
            call(Bucket=gw_bucket, Key="c", IfUnmodifiedSince=before)
        assert _status(exc)[0] == 412
        call(Bucket=gw_bucket, Key="c", IfModifiedSince=before)
        call(Bucket=gw_bucket, Key="c", IfUnmodifiedSince=after)
        call(Bucket=gw_bucket, Key="c", IfNoneMatch='"other"')
        # RFC 9110 13.2.2: a true If-Match makes If-Unmodified-Since irrelevant, a false
        # If-None-Match makes If-Modified-Since irrelevant
        call(Bucket=gw_bucket, Key="c", IfMatch=etag, IfUnmodifiedSince=before)
        with pytest.raises(ClientError) as exc:
            call(Bucket=gw_bucket, Key="c", IfNoneMatch=etag, IfModifiedSince=before)
        assert _status(exc)[0] == 304
    with pytest.raises(ClientError) as exc:
        gw_s3.get_object(Bucket=gw_bucket, Key="c", IfMatch='"0000"')
    assert _status(exc) == (412, "PreconditionFailed")


def test_conditional_put_and_delete(gw_s3: Any, gw_bucket: str) -> None:
    first = gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as exc:
        gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert _status(exc) == (412, "PreconditionFailed")
    with pytest.raises(ClientError) as exc:
        gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"second", IfMatch='"0000"')
    assert _status(exc) == (412, "PreconditionFailed")
    with pytest.raises(ClientError) as exc:
        gw_s3.put_object(Bucket=gw_bucket, Key="absent", Body=b"x", IfMatch=first["ETag"])
    assert _status(exc) == (412, "PreconditionFailed")
    assert gw_s3.get_object(Bucket=gw_bucket, Key="k")["Body"].read() == b"first"
    second = gw_s3.put_object(Bucket=gw_bucket, Key="k", Body=b"second", IfMatch=first["ETag"])
    assert gw_s3.get_object(Bucket=gw_bucket, Key="k")["Body"].read() == b"second"

    with pytest.raises(ClientError) as exc:
        gw_s3.delete_object(Bucket=gw_bucket, Key="k", IfMatch=first["ETag"])
    assert _status(exc) == (412, "PreconditionFailed")
    assert gw_s3.get_object(Bucket=gw_bucket, Key="k")["Body"].read() == b"second"
    gw_s3.delete_object(Bucket=gw_bucket, Key="k", IfMatch=second["ETag"])
    with pytest.raises(ClientError):
        gw_s3.head_object(Bucket=gw_bucket, Key="k")

    # CompleteMultipartUpload with If-None-Match: *
    gw_s3.put_object(Bucket=gw_bucket, Key="mp", Body=b"there")
    up, done = _multipart(gw_s3, gw_bucket, "mp", [b"new"])
    with pytest.raises(ClientError) as exc:
        gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="mp", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": done}, IfNoneMatch="*")
    assert _status(exc) == (412, "PreconditionFailed")
    assert gw_s3.get_object(Bucket=gw_bucket, Key="mp")["Body"].read() == b"there"


def _signed_put(endpoint: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The head of a SigV4-signed PUT (botocore's signer), to send by hand on a socket."""
    req = AWSRequest("PUT", endpoint + path, data=body, headers=headers)
    S3SigV4Auth(Credentials(GW_ACCESS, GW_SECRET), "s3", REGION).add_auth(req)
    host = endpoint.removeprefix("http://")
    lines = [f"PUT {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}",
             *(f"{k}: {v}" for k, v in req.headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_concurrent_put_if_absent_has_one_winner(gateway: Gateway, gw_bucket: str) -> None:
    """Many put-if-absent PUTs of one key whose bodies complete at the same moment (each sent
    but its last byte, then every last byte at once): the checks all run while the first
    write is still in the store, and exactly one PUT wins."""
    n = 16
    # large: the store checksums in a thread (and the segment fills), so a put yields between
    # its check and its index update for long enough
    bodies = [os.urandom(8 * MiB) for _ in range(n)]
    host, port = gateway.endpoint.removeprefix("http://").split(":")
    socks = []
    try:
        for body in bodies:
            sock = socket.create_connection((host, int(port)), timeout=30)
            head = _signed_put(gateway.endpoint, f"/{gw_bucket}/once", body,
                               {"If-None-Match": "*"})
            sock.sendall(head + body[:-1])
            socks.append(sock)
        for sock, body in zip(socks, bodies, strict=True):
            sock.sendall(body[-1:])
        statuses = []
        for sock in socks:
            reply = b""
            while b"\r\n" not in reply:
                chunk = sock.recv(4096)
                assert chunk, "the gateway closed the connection without an answer"
                reply += chunk
            statuses.append(int(reply.split(b" ", 2)[1]))
    finally:
        for sock in socks:
            sock.close()
    assert sorted(statuses) == [200] + [412] * (n - 1)
    winner = statuses.index(200)
    got = gateway_client(gateway.endpoint).get_object(Bucket=gw_bucket, Key="once")
    assert got["Body"].read() == bodies[winner]


def test_checksum_mode(gw_s3: Any, gw_bucket: str) -> None:
    data = os.urandom(100_000)
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    put = gw_s3.put_object(Bucket=gw_bucket, Key="sum", Body=data, ChecksumAlgorithm="CRC32")
    assert put["ChecksumCRC32"] == crc
    head = gw_s3.head_object(Bucket=gw_bucket, Key="sum", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32"] == crc
    got = gw_s3.get_object(Bucket=gw_bucket, Key="sum", ChecksumMode="ENABLED")
    assert got["ChecksumCRC32"] == crc and got["Body"].read() == data  # botocore validates it
    sha = base64.b64encode(hashlib.sha256(data).digest()).decode()
    gw_s3.put_object(Bucket=gw_bucket, Key="sha", Body=data, ChecksumSHA256=sha)
    assert gw_s3.head_object(Bucket=gw_bucket, Key="sha",
                             ChecksumMode="ENABLED")["ChecksumSHA256"] == sha
    assert "ChecksumSHA256" not in gw_s3.head_object(Bucket=gw_bucket, Key="sha")

    # multipart, composite: base64(sha256(part digests))-N, the algorithm echoed at each step
    parts = [os.urandom(5 * MiB), os.urandom(3000)]
    up, done = _multipart(gw_s3, gw_bucket, "mp-sum", parts, ChecksumAlgorithm="SHA256")
    assert up["ChecksumAlgorithm"] == "SHA256"
    part_sums = [hashlib.sha256(p).digest() for p in parts]
    assert [d["ChecksumSHA256"] for d in done] == [base64.b64encode(s).decode()
                                                   for s in part_sums]
    fin = gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="mp-sum",
                                          UploadId=up["UploadId"],
                                          MultipartUpload={"Parts": done})
    composite = base64.b64encode(hashlib.sha256(b"".join(part_sums)).digest()).decode() + "-2"
    assert fin["ChecksumSHA256"] == composite
    head = gw_s3.head_object(Bucket=gw_bucket, Key="mp-sum", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == composite
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-checksum-type"] == "COMPOSITE"

    # multipart, FULL_OBJECT CRC32: the CRC of the whole body, which botocore checks on GET
    up, done = _multipart(gw_s3, gw_bucket, "mp-full", parts, ChecksumAlgorithm="CRC32",
                          ChecksumType="FULL_OBJECT")
    assert up["ChecksumType"] == "FULL_OBJECT"
    whole = base64.b64encode(zlib.crc32(b"".join(parts)).to_bytes(4, "big")).decode()
    fin = gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="mp-full",
                                          UploadId=up["UploadId"], ChecksumType="FULL_OBJECT",
                                          MultipartUpload={"Parts": done})
    assert fin["ChecksumCRC32"] == whole and fin["ChecksumType"] == "FULL_OBJECT"
    got = gw_s3.get_object(Bucket=gw_bucket, Key="mp-full", ChecksumMode="ENABLED")
    assert got["ChecksumCRC32"] == whole and got["Body"].read() == b"".join(parts)

    # a part whose listed checksum is not the one it was uploaded with
    up, done = _multipart(gw_s3, gw_bucket, "mp-bad", [b"abc"], ChecksumAlgorithm="SHA256")
    done[0]["ChecksumSHA256"] = base64.b64encode(b"\0" * 32).decode()
    with pytest.raises(ClientError) as exc:
        gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="mp-bad", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": done})
    assert _status(exc) == (400, "InvalidPart")


def test_part_number(gw_s3: Any, gw_bucket: str) -> None:
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(777)]
    up, done = _multipart(gw_s3, gw_bucket, "parts", parts)
    gw_s3.complete_multipart_upload(Bucket=gw_bucket, Key="parts", UploadId=up["UploadId"],
                                    MultipartUpload={"Parts": done})
    start = 0
    for n, data in enumerate(parts, start=1):
        got = gw_s3.get_object(Bucket=gw_bucket, Key="parts", PartNumber=n)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["PartsCount"] == 3
        assert got["ContentRange"] == f"bytes {start}-{start + len(data) - 1}/{10 * MiB + 777}"
        assert got["Body"].read() == data
        head = gw_s3.head_object(Bucket=gw_bucket, Key="parts", PartNumber=n)
        assert head["ContentLength"] == len(data) and head["PartsCount"] == 3
        start += len(data)
    with pytest.raises(ClientError) as exc:
        gw_s3.get_object(Bucket=gw_bucket, Key="parts", PartNumber=4)
    assert _status(exc) == (416, "InvalidPartNumber")
    with pytest.raises(ClientError) as exc:
        gw_s3.get_object(Bucket=gw_bucket, Key="parts", PartNumber=1, Range="bytes=0-1")
    assert _status(exc)[0] == 400
    # an object not uploaded in parts: part 1 is the whole object
    gw_s3.put_object(Bucket=gw_bucket, Key="single", Body=b"whole")
    assert gw_s3.get_object(Bucket=gw_bucket, Key="single", PartNumber=1)["Body"].read() == \
        b"whole"
    with pytest.raises(ClientError) as exc:
        gw_s3.get_object(Bucket=gw_bucket, Key="single", PartNumber=2)
    assert _status(exc)[0] == 416


def test_metadata_and_etag_survive_a_restart(gateway: Gateway, gw_bucket: str) -> None:
    """The module's gateway restarts on its store, the second time with ``--etag fast``: what
    the index held comes back from the manifests, stored MD5 ETags included; new PUTs get the
    fast ETag, the same in every answer. It ends restarted as it was."""
    s3, bucket = gateway_client(gateway.endpoint), gw_bucket
    data = os.urandom(300_000)
    s3.put_object(Bucket=bucket, Key="kept", Body=data, ContentType="application/x-kv",
                  Metadata={"layer": "7"}, ChecksumAlgorithm="CRC32")
    parts = [os.urandom(5 * MiB), b"tail"]
    up, done = _multipart(s3, bucket, "kept-mp", parts)
    s3.complete_multipart_upload(Bucket=bucket, Key="kept-mp", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": done})
    before = {k: s3.head_object(Bucket=bucket, Key=k, ChecksumMode="ENABLED")
              for k in ("kept", "kept-mp")}
    assert before["kept"]["ETag"] == _md5(data)
    assert before["kept"]["Metadata"] == {"layer": "7"}
    args = list(gateway.args)
    try:
        assert gateway.terminate() == 0  # seals and uploads what is in memory
        gateway.args = [*args, "--etag", "fast"]
        gateway.start()
        s3 = gateway_client(gateway.endpoint)
        for key, old in before.items():
            new = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
            for field in ("ETag", "ContentType", "Metadata", "ChecksumCRC32", "ContentLength"):
                assert new.get(field) == old.get(field), (key, field)
        got = s3.get_object(Bucket=bucket, Key="kept-mp", PartNumber=2)
        assert got["Body"].read() == b"tail"

        fresh = os.urandom(70_000)
        put = s3.put_object(Bucket=bucket, Key="fast", Body=fresh)
        fast = f'"{zlib.crc32(fresh):08x}{len(fresh):x}"'
        assert put["ETag"] == fast
        assert s3.head_object(Bucket=bucket, Key="fast")["ETag"] == fast
        assert s3.get_object(Bucket=bucket, Key="fast")["ETag"] == fast
        listed = {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
        assert listed == {"fast": fast, "kept": _md5(data), "kept-mp": before["kept-mp"]["ETag"]}
    finally:
        gateway.stop()
        gateway.args = args
        gateway.start()
