"""Security: namespace isolation between credentials, every operation by every restricted
credential on its own, another's and nobody's namespace."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

from s3kv.frames import encode_frames
from tests.reliability.conftest import Report
from tests.reliability.security.tenants import (
    A_BUCKET,
    ALL_BUCKETS,
    CREDS,
    DOMAIN,
    EXISTING,
    RID,
    Client,
    allows,
    check,
    client,
)
from tests.support.gateway import Gateway
from tests.support.rawhttp import Response


def _delete_xml(*keys: str) -> bytes:
    objs = "".join(f"<Object><Key>{k}</Key></Object>" for k in keys)
    return f"<Delete>{objs}</Delete>".encode()


def _complete_xml(etag: str) -> bytes:
    return (f"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag>"
            "</Part></CompleteMultipartUpload>").encode()


def _frames(key: str, data: bytes) -> bytes:
    return b"".join(encode_frames([(key, data)]))


Op = tuple[str, str, str, bytes, dict[str, str]]


def _operations(b: str, upload: str, etag: str) -> list[Op]:
    """(name, method, target, body, headers) of every S3 and /v1 operation on bucket ``b``."""
    keys_json = b'{"keys": ["k1", "k0"]}'
    return [
        ("ListObjectsV2", "GET", f"/{b}?list-type=2", b"", {}),
        ("ListObjectsV2 prefix", "GET", f"/{b}?list-type=2&prefix=k&delimiter=/", b"", {}),
        ("HeadBucket", "HEAD", f"/{b}", b"", {}),
        ("GetBucketLocation", "GET", f"/{b}?location", b"", {}),
        ("GetBucketAcl", "GET", f"/{b}?acl", b"", {}),
        ("GetBucketVersioning", "GET", f"/{b}?versioning", b"", {}),
        ("ListObjectVersions", "GET", f"/{b}?versions&prefix=k", b"", {}),
        ("ListMultipartUploads", "GET", f"/{b}?uploads", b"", {}),
        ("CreateBucket", "PUT", f"/{b}", b"", {}),
        ("PutObject", "PUT", f"/{b}/k1", b"evil", {}),
        ("GetObject", "GET", f"/{b}/k1", b"", {}),
        ("GetObject range", "GET", f"/{b}/k1", b"", {"Range": "bytes=0-1"}),
        ("HeadObject", "HEAD", f"/{b}/k1", b"", {}),
        ("CopyObject", "PUT", f"/{b}/k9", b"", {"x-amz-copy-source": f"/{b}/k1"}),
        ("CreateMultipartUpload", "POST", f"/{b}/k2?uploads", b"", {}),
        ("UploadPart", "PUT", f"/{b}/k2?partNumber=1&uploadId={upload}", b"evil", {}),
        ("CompleteMultipartUpload", "POST", f"/{b}/k2?uploadId={upload}",
         _complete_xml(etag), {}),
        ("AbortMultipartUpload", "DELETE", f"/{b}/k2?uploadId={upload}", b"", {}),
        ("ListParts", "GET", f"/{b}/k2?uploadId={upload}", b"", {}),
        ("DeleteObjects", "POST", f"/{b}?delete", _delete_xml("k1", "k0"), {}),
        ("DeleteObject", "DELETE", f"/{b}/k1", b"", {}),
        ("DeleteBucket", "DELETE", f"/{b}", b"", {}),
        ("v1 lookup", "POST", f"/v1/{b}/lookup", keys_json, {}),
        ("v1 batch-get", "POST", f"/v1/{b}/batch-get", keys_json, {}),
        ("v1 locate", "POST", f"/v1/{b}/locate", keys_json, {}),
        ("v1 batch-put", "POST", f"/v1/{b}/batch-put", _frames("k1", b"evil"),
         {"Content-Type": "application/x-s3kv-frames"}),
    ]


def _snapshot(admin: Client, b: str, upload: str) -> tuple[Any, ...]:
    """What the unrestricted admin sees of bucket ``b``: existence, listing, bytes, upload."""
    def seen(r: Response) -> tuple[int, str | None, bytes]:
        # LastModified left out: compaction rewrites live blocks with a new written_at
        body = re.sub(rb"<LastModified>[^<]*</LastModified>", b"", r.body)
        return r.status, r.code, body if r.status == 200 else b""

    head = admin("HEAD", f"/{b}").status
    listing = seen(admin("GET", f"/{b}?list-type=2"))
    k0 = seen(admin("GET", f"/{b}/k0"))
    k1 = seen(admin("GET", f"/{b}/k1"))
    # the owner's upload still takes parts under its id
    part = admin("PUT", f"/{b}/k2?partNumber=2&uploadId={upload}", b"p").status
    return head, listing, k0, k1, part


def _seed(admin: Client, b: str) -> tuple[str, str]:
    """Bucket ``b`` with k0, k1 and an open upload on k2 (id, ETag of its part 1)."""
    assert admin("PUT", f"/{b}").status in (200, 409)
    assert admin("PUT", f"/{b}/k0", b"zero").status == 200
    assert admin("PUT", f"/{b}/k1", b"one-" + b.encode()).status == 200
    r = admin("POST", f"/{b}/k2?uploads")
    upload = r.body.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()
    etag = admin("PUT", f"/{b}/k2?partNumber=1&uploadId={upload}", b"part").headers["etag"]
    return upload, etag


def test_namespace_isolation_matrix(gw: Gateway, counter: list[int],
                                    reliability_report: Report) -> None:
    """Every operation, by every restricted credential, on its own, another's (existing and
    not) and nobody's namespace: a denied request gets the one uniform 403 and changes
    nothing; an allowed one is never refused."""
    admin = client(gw, "admin", counter)
    denied_answers: set[tuple[int, str | None, str]] = set()
    denied = allowed = 0
    for who in ("team-a", "team-b"):
        c = client(gw, who, counter)
        for b in ALL_BUCKETS:
            exists = b in EXISTING
            upload, etag = _seed(admin, b) if exists else (uuid.uuid4().hex, '"x"')
            before = _snapshot(admin, b, upload)
            ops = _operations(b, upload, etag)
            for name, method, target, body, headers in ops:
                for via in ("sigv4", "bearer", "virtual-host"):
                    native = target.startswith("/v1/")
                    if via == "bearer" and not native:
                        continue
                    if via == "virtual-host" and (native or name == "CopyObject"):
                        continue
                    if via == "bearer":
                        r = c.bearer(method, target, body)
                    elif via == "virtual-host":
                        _, _, rest = target[1:].partition(b)
                        vt = rest if rest.startswith("/") else "/" + rest
                        r = c(method, vt, body, headers=headers, host=f"{b}.{DOMAIN}")
                    else:
                        r = c(method, target, body, headers=headers)
                    check(r, native=native)
                    if allows(who, b):
                        allowed += 1
                        assert r.code != "AccessDenied", (who, b, name, via, r)
                    else:
                        denied += 1
                        assert r.status == 403, (who, b, name, via, r)
                        msg = b"" if method == "HEAD" else r.body.split(b"<Resource>")[0]
                        msg = msg.split(b'"request_id"')[0]
                        denied_answers.add((r.status, r.code, msg.decode()))
            if not allows(who, b):
                after = _snapshot(admin, b, upload)
                for _ in range(5):  # a read racing a compaction may miss once: look again
                    if after == before:
                        break
                    time.sleep(0.5)
                    after = _snapshot(admin, b, upload)
                assert after == before, (who, b, [(x, y) for x, y in zip(before, after,
                                                                         strict=True) if x != y])
            elif exists:  # the caller may have deleted things: put the bucket back
                _seed(admin, b)
    # the same answer everywhere (bucket existing or not, any operation): exactly one error
    # document for GET/PUT/POST/DELETE (S3 and /v1 forms) and a bare 403 for HEAD
    codes = {(s, c) for s, c, _ in denied_answers}
    assert codes == {(403, "AccessDenied"), (403, None)}, denied_answers
    assert len({m for _, c, m in denied_answers if c}) == 2, denied_answers  # XML + JSON
    # ListBuckets: only the allowed namespaces
    for who in CREDS:
        body = client(gw, who, counter)("GET", "/").body.decode()
        names = {n.split("</Name>")[0] for n in body.split("<Name>")[1:]}
        assert names == {b for b in names if allows(who, b)}, (who, names)
        assert {b for b in EXISTING if allows(who, b)} <= names
    # store-wide endpoints: unrestricted credentials only
    for who in CREDS:
        c = client(gw, who, counter)
        for method, path in (("POST", "/v1/flush"), ("GET", "/v1/stats")):
            for r in (c(method, path), c.bearer(method, path)):
                check(r, native=True)
                assert r.status == (200 if CREDS[who][1] is None else 403), (who, path, r)
    # CreateBucket only inside the patterns
    a = client(gw, "team-a", counter)
    assert a("PUT", f"/team-a-new-{RID}").status == 200
    assert a("PUT", f"/team-ab-{RID}").code == "AccessDenied"
    assert a("PUT", "/sharedx").code == "AccessDenied"
    assert admin("HEAD", "/sharedx").status == 404
    reliability_report.record(
        "security", "namespace isolation: 2 restricted credentials x 6 namespaces x "
        f"{len(ops)} operations (SigV4, bearer, virtual-host)", faults=denied,
        requests=counter[0], note=f"{denied} denied, {allowed} allowed")


def test_locate_gives_segment_urls_to_unrestricted_callers_only(gw: Gateway,
                                                                 counter: list[int]) -> None:
    """A segment object holds blocks of several namespaces, so a presigned URL of it would let
    a restricted credential read outside its namespaces: ``locate`` answers such a caller
    "gateway" for every block it may read (batch get, which checks the namespace), and URLs
    only to an unrestricted one."""
    admin = client(gw, "admin", counter)
    assert admin("PUT", f"/{A_BUCKET}").status in (200, 409)
    assert admin("PUT", f"/{A_BUCKET}/k0", b"zero" * 1000).status == 200
    assert admin.bearer("POST", "/v1/flush").status == 200
    keys = b'{"keys": ["k0", "nope"]}'
    mine = client(gw, "team-a", counter).bearer("POST", f"/v1/{A_BUCKET}/locate", keys)
    assert mine.status == 200, mine
    doc = json.loads(mine.body)
    assert doc["urls"] == [] and doc["blocks"] == ["gateway", None]
    for who in ("admin", "ops"):
        r = client(gw, who, counter).bearer("POST", f"/v1/{A_BUCKET}/locate", keys)
        doc = json.loads(r.body)
        assert r.status == 200 and len(doc["urls"]) == 1 and doc["blocks"][0][0] == 0, r
