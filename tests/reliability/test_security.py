"""Security: signatures (other keys, replays, expiry, presigned URLs), path tricks, oversized
headers and bodies, and namespace isolation between credentials.

Everything runs against the real gateway process (``s3kv serve``) over HTTP: on the moto S3
server, and on the file backend where the filesystem is checked for anything written or read
outside the store directory. Requests are sent raw (tests/support/rawhttp.py) so that the test,
not a client library, chooses every byte.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
import time
import unicodedata
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from s3kv.config import Settings
from s3kv.errors import ConfigError
from s3kv.frames import encode_frames
from s3kv.gateway.server import check_settings
from tests.reliability.conftest import Report
from tests.support import rawhttp
from tests.support.clock import EXPIRED_BY, botocore_signs_earlier
from tests.support.gateway import (
    GW_ACCESS,
    GW_SECRET,
    MAX_BLOCK,
    SMALL,
    Gateway,
    backend_store,
    running_gateway,
)
from tests.support.rawhttp import Response, presign, send, sign, skewed, well_formed
from tests.support.s3server import REGION, MotoServer

DOMAIN = "s3.localtest"
RID = uuid.uuid4().hex[:6]
A_BUCKET, A_SHARED = f"team-a-{RID}", "shared"
B_BUCKET, B_GHOST = f"team-b-{RID}", f"team-b-ghost-{RID}"
OTHER, OTHER_GHOST = f"other-{RID}", f"other-ghost-{RID}"
ALL_BUCKETS = [A_BUCKET, A_SHARED, B_BUCKET, B_GHOST, OTHER, OTHER_GHOST]
EXISTING = [A_BUCKET, A_SHARED, B_BUCKET, OTHER]

CREDS: dict[str, tuple[str, list[str] | None]] = {
    "admin": (GW_SECRET, None),  # S3KV_ACCESS_KEY/S3KV_SECRET_KEY: unrestricted
    "team-a": ("team-a-secret/0123+x", ["team-a-*", "shared"]),
    "team-b": ("team-b-secret=4567", ["team-b-*"]),
    "ops": ("ops-secret-89", None),  # in the file, without namespaces: unrestricted
}
KEYS = {"admin": GW_ACCESS, "team-a": "team-a", "team-b": "team-b", "ops": "ops"}

CREDENTIALS_TOML = """
[[credential]]
access_key = "team-a"
secret_key = "team-a-secret/0123+x"
namespaces = ["team-a-*", "shared"]

[[credential]]
access_key = "team-b"
secret_key = "team-b-secret=4567"
namespaces = ["team-b-*"]

[[credential]]
access_key = "ops"
secret_key = "ops-secret-89"
"""


def allows(who: str, bucket: str) -> bool:
    from fnmatch import fnmatchcase

    patterns = CREDS[who][1]
    return patterns is None or any(fnmatchcase(bucket, p) for p in patterns)


class Client:
    """Raw, signed requests as one credential; counts what it sends."""

    def __init__(self, gw: Gateway, who: str, counter: list[int]) -> None:
        self.gw, self.who, self.counter = gw, who, counter
        self.access, self.secret = KEYS[who], CREDS[who][0]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.gw.port}"

    def __call__(self, method: str, target: str, body: bytes = b"", *,
                 headers: dict[str, str] | None = None, host: str | None = None,
                 access: str | None = None, secret: str | None = None,
                 when: Any = None) -> Response:
        hs = sign(method, target, host or self.host, access or self.access,
                  secret or self.secret, body=body, headers=headers, when=when)
        self.counter[0] += 1
        return send(self.gw.port, method, target, hs, body)

    def bearer(self, method: str, path: str, body: bytes = b"", token: str | None = None
               ) -> Response:
        self.counter[0] += 1
        tok = token if token is not None else f"{self.access}:{self.secret}"
        return send(self.gw.port, method, path, {"Authorization": f"Bearer {tok}",
                                                 "Content-Type": "application/json"}, body)


@pytest.fixture(scope="module")
def cred_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("creds") / "credentials.toml"
    path.write_text(CREDENTIALS_TOML)
    return path


@pytest.fixture(scope="module")
def gw(s3_server: MotoServer, cred_file: Path) -> Iterator[Gateway]:
    args = [*SMALL, "--domain", DOMAIN, "--credentials-file", str(cred_file)]
    with running_gateway(backend_store(s3_server), args) as g:
        yield g


@pytest.fixture
def counter() -> list[int]:
    return [0]


def client(gw: Gateway, who: str, counter: list[int]) -> Client:
    return Client(gw, who, counter)


def check(resp: Response, *, native: bool = False) -> Response:
    problem = well_formed(resp, native=native)
    assert problem is None, problem
    return resp


# -- configuration -----------------------------------------------------------------------------

BAD_FILES = [
    ("[[credential]]\naccess_key = 'a'\n", "secret_key"),
    ("[[credential]]\naccess_key = 'a'\nsecret_key = 's'\nnamespaces = 'x-*'\n", "list"),
    ("[[credential]]\naccess_key = 'a'\nsecret_key = 's'\nnamespaces = ['../x']\n", "pattern"),
    ("[[credential]]\naccess_key = 'a'\nsecret_key = 's'\nnamespace = ['x']\n", "unknown"),
    ("[[credential]]\naccess_key = 'a:b'\nsecret_key = 's'\n", "must not contain"),
    ("[[credential]]\naccess_key = 'a'\nsecret_key = 's'\n[[credential]]\naccess_key = 'a'\n"
     "secret_key = 't'\n", "twice"),
    ("[credential]\naccess_key = 'a'\n", "array of tables"),
    ("access_key = 'a'\n", "top-level"),
    ("[[credential\n", "credentials"),
]


def test_bad_credentials_file_refused_at_start(tmp_path: Path,
                                               reliability_report: Report) -> None:
    for i, (text, why) in enumerate(BAD_FILES):
        path = tmp_path / f"c{i}.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=why):
            check_settings(Settings.load(env={"S3KV_CREDENTIALS_FILE": str(path)}))
    with pytest.raises(ConfigError, match="cannot read credentials file"):
        check_settings(Settings.load(env={"S3KV_CREDENTIALS_FILE": str(tmp_path / "absent.toml")}))
    good = tmp_path / "good.toml"
    good.write_text(CREDENTIALS_TOML)
    settings = Settings.load(env={"S3KV_CREDENTIALS_FILE": str(good)})
    check_settings(settings)
    assert settings.credentials_file
    reliability_report.record("security", "bad credentials files refused at start "
                              "(missing secret, bad patterns, duplicates, unknown fields...)",
                              faults=len(BAD_FILES) + 1)


def test_credentials_file_alone_enables_auth(s3_server: MotoServer, cred_file: Path,
                                             reliability_report: Report) -> None:
    """Without S3KV_ACCESS_KEY, a credentials file still turns authentication on."""
    with running_gateway(backend_store(s3_server), [*SMALL, "--credentials-file",
                                                    str(cred_file)], credentials=False) as g:
        n = [0]
        ops = Client(g, "ops", n)
        assert ops("PUT", f"/{OTHER}").status == 200
        assert check(send(g.port, "GET", "/", {})).code == "AccessDenied"
        admin = Client(g, "admin", n)  # not configured in this gateway
        assert check(admin("GET", "/")).code == "InvalidAccessKeyId"
    reliability_report.record("security", "credentials file without a main key: auth on",
                              faults=2, requests=n[0] + 1)


# -- signatures ---------------------------------------------------------------------------------

def test_signed_with_another_key(gw: Gateway, counter: list[int],
                                 reliability_report: Report) -> None:
    admin = client(gw, "admin", counter)
    a = client(gw, "team-a", counter)
    assert admin("PUT", f"/{A_BUCKET}").status in (200, 409)
    assert a("PUT", f"/{A_BUCKET}/k", b"v").status == 200
    cases = [
        # team-a's access key, team-b's secret: the signature cannot match
        (dict(access="team-a", secret=CREDS["team-b"][0]), "SignatureDoesNotMatch"),
        # admin's key id, team-a's secret: no escalation by naming a stronger key
        (dict(access=GW_ACCESS, secret=CREDS["team-a"][0]), "SignatureDoesNotMatch"),
        (dict(access="team-c", secret="whatever"), "InvalidAccessKeyId"),
        (dict(access="team-a ", secret=CREDS["team-a"][0]), "InvalidAccessKeyId"),
        (dict(access="TEAM-A", secret=CREDS["team-a"][0]), "InvalidAccessKeyId"),
    ]
    faults = 0
    for kw, code in cases:
        for method, target, body in [("GET", f"/{A_BUCKET}/k", b""),
                                     ("PUT", f"/{A_BUCKET}/k", b"evil"),
                                     ("DELETE", f"/{A_BUCKET}/k", b""),
                                     ("GET", "/", b"")]:
            r = check(a(method, target, body, **kw))
            faults += 1
            assert (r.status, r.code) == (403, code), (kw, method, target, r)
    assert a("GET", f"/{A_BUCKET}/k").body == b"v"
    reliability_report.record("security", "requests signed with another credential's key",
                              faults=faults, requests=counter[0])


def test_replayed_signatures(gw: Gateway, counter: list[int],
                             reliability_report: Report) -> None:
    a = client(gw, "team-a", counter)
    a("PUT", f"/{A_BUCKET}")
    target = f"/{A_BUCKET}/replay"
    hs = sign("PUT", target, a.host, a.access, a.secret, body=b"original")
    counter[0] += 2
    assert send(gw.port, "PUT", target, hs, b"original").status == 200
    # S3 semantics: an identical request replayed within the skew window is accepted (S3 keeps
    # no nonce; TLS and the 15-minute window are the protection). It writes the same bytes.
    assert send(gw.port, "PUT", target, hs, b"original").status == 200
    faults = 0
    # the same signature with another body: the signed payload hash no longer matches
    r = check(send(gw.port, "PUT", target, hs, b"tampered"))
    assert (r.status, r.code) == (400, "XAmzContentSHA256Mismatch")
    # another path, method or query: the signature covers them
    for method, other in [("PUT", f"/{A_BUCKET}/replay2"), ("PUT", f"/{A_SHARED}/replay"),
                          ("PUT", f"{target}?x-id=PutObject"), ("POST", target),
                          ("DELETE", target), ("PUT", target.upper())]:
        r = check(send(gw.port, method, other, hs, b"original"))
        assert (r.status, r.code) == (403, "SignatureDoesNotMatch"), (method, other, r)
        faults += 1
    # an altered signed header (x-amz-date moved within the window) breaks it too
    moved = dict(hs, **{"x-amz-date": skewed(1).strftime("%Y%m%dT%H%M%SZ")})
    assert check(send(gw.port, "PUT", target, moved, b"original")).code == \
        "SignatureDoesNotMatch"
    # a replay outside the 15-minute window: a request signed 16 minutes ago or ahead
    for minutes in (-16, 16, -60 * 24):
        r = check(a("PUT", target, b"late", when=skewed(minutes)))
        assert (r.status, r.code) == (403, "RequestTimeTooSkewed"), (minutes, r)
        faults += 1
    counter[0] += 9
    assert a("GET", target).body == b"original"
    reliability_report.record(
        "security", "replayed signatures (other body/path/method/query/date; outside window)",
        faults=faults + 2, requests=counter[0],
        note="an identical replay within 15 min is accepted, as on S3")


def test_presigned_urls(gw: Gateway, counter: list[int], reliability_report: Report) -> None:
    a = client(gw, "team-a", counter)
    a("PUT", f"/{A_BUCKET}")
    a("PUT", f"/{A_BUCKET}/p1", b"one")
    a("PUT", f"/{A_BUCKET}/p2", b"two")
    url = presign("GET", f"/{A_BUCKET}/p1", a.host, a.access, a.secret)
    assert send(gw.port, "GET", url, {}).body == b"one"
    faults = 0
    # used for another key, bucket or method
    for method, target in [("GET", url.replace("/p1?", "/p2?")),
                           ("GET", url.replace(A_BUCKET, A_SHARED)),
                           ("PUT", url), ("DELETE", url), ("HEAD", url),
                           ("GET", url.replace("X-Amz-Expires=300", "X-Amz-Expires=600"))]:
        r = check(send(gw.port, method, target, {}, b"x" if method == "PUT" else b""))
        assert r.status == 403, (method, target, r)
        assert method == "HEAD" or r.code == "SignatureDoesNotMatch"
        faults += 1
    # another credential's bucket: the URL is valid for team-a only where team-a may go
    denied = presign("GET", f"/{B_BUCKET}/p1", a.host, a.access, a.secret)
    assert check(send(gw.port, "GET", denied, {})).code == "AccessDenied"
    # expired: signed an hour ago for 60 s; and a real client's URL after its expiry
    old = presign("GET", f"/{A_BUCKET}/p1", a.host, a.access, a.secret, expires=60,
                  when=skewed(-60))
    r = check(send(gw.port, "GET", old, {}))
    assert (r.status, r.code) == (403, "AccessDenied")
    s3 = boto3.client("s3", endpoint_url=gw.endpoint, region_name=REGION,
                      aws_access_key_id=a.access, aws_secret_access_key=a.secret,
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    with botocore_signs_earlier(EXPIRED_BY + 1):  # valid for 1 s, EXPIRED_BY s ago
        short = s3.generate_presigned_url("get_object", Params={"Bucket": A_BUCKET,
                                                                "Key": "p1"}, ExpiresIn=1)
    short_target = short.split(str(gw.port), 1)[1]
    assert check(send(gw.port, "GET", short_target, {})).code == "AccessDenied"
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": A_BUCKET, "Key": "p3"},
                                        ExpiresIn=60).split(str(gw.port), 1)[1]
    assert send(gw.port, "PUT", put_url, {}, b"three").status == 200
    assert check(send(gw.port, "GET", put_url, {})).code == "SignatureDoesNotMatch"
    # not valid yet (dated 20 minutes ahead), expiry over a week
    early = presign("GET", f"/{A_BUCKET}/p1", a.host, a.access, a.secret, when=skewed(20))
    assert check(send(gw.port, "GET", early, {})).status == 403
    week = presign("GET", f"/{A_BUCKET}/p1", a.host, a.access, a.secret, expires=604801)
    assert check(send(gw.port, "GET", week, {})).code == "AuthorizationQueryParametersError"
    faults += 6
    counter[0] += 12
    assert a("GET", f"/{A_BUCKET}/p2").body == b"two"
    reliability_report.record("security", "presigned URLs: other key/bucket/method, expired, "
                              "tampered, not yet valid", faults=faults, requests=counter[0])


# -- namespace isolation ------------------------------------------------------------------------

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


def test_bearer_tokens(gw: Gateway, counter: list[int], reliability_report: Report) -> None:
    a = client(gw, "team-a", counter)
    body = b'{"keys": ["k"]}'
    bad = ["", "team-a", "team-a:", "team-a:wrong", f"team-b:{CREDS['team-a'][0]}",
           f"team-a:{CREDS['team-a'][0]}x", "ünïcödé:sécret", "team-a:" + "x" * 5000,
           f"{GW_ACCESS}:{CREDS['team-a'][0]}"]
    for tok in bad:
        r = check(a.bearer("POST", f"/v1/{A_BUCKET}/lookup", body, token=tok), native=True)
        assert (r.status, r.code) == (403, "AccessDenied"), (tok, r)
    # a bearer token is for /v1 only: on the S3 front it is an unsupported auth scheme
    r = check(a.bearer("GET", f"/{A_BUCKET}?list-type=2"))
    assert (r.status, r.code) == (400, "AuthorizationHeaderMalformed")
    reliability_report.record("security", "bad bearer tokens (wrong, other key, non-ASCII, "
                              "long, on the S3 front)", faults=len(bad) + 1,
                              requests=counter[0])


# -- path tricks on the file backend --------------------------------------------------------------

SECRET = b"TOP-SECRET-do-not-serve-" + uuid.uuid4().hex.encode()

BUCKET_TRICKS = ["..", "%2e%2e", "%2E%2E", ".", "...", "a..b", "..%2f..%2fetc", "%2e%2e%2fx",
                 "store", "%00abc", "abc%00", "ab%2fc", "ab%5cc", "ABC", "a" * 64, "aa",
                 "x" * 63, "caf%C3%A9", "ab%0d%0aSet-Cookie:x=1", ".uploads", "-abc", "abc-"]

KEY_TRICKS = ["../secret.txt", "%2e%2e/secret.txt", "%2E%2E%2Fsecret.txt", "..%2fsecret.txt",
              "a/../../secret.txt", "a/%2e%2e/%2e%2e/secret.txt", "./x", "x/.", "%2e",
              "//etc/passwd", "/abs", "a//b", "a%2F%2Fb", "a%2fb", "%00nul", "x%00y",
              "a%0d%0aSet-Cookie:%20x=1", "%7f", "%ff%fe", "%c0%ae%c0%ae/secret.txt",
              "a%5c..%5c..%5csecret.txt", "..%5csecret.txt", ".uploads/x", "segments/x",
              "k" * 1024, "k" * 1025, "%F0%9F%94%91" * 256, "%F0%9F%94%91" * 257,
              "%E6%97%A5%E6%9C%AC/%E3%82%AD%E3%83%BC", "%E2%80%AEtxt.exe", "%EF%BB%BFbom",
              "caf%C3%A9", "cafe%CC%81", "%EF%BC%8E%EF%BC%8E/secret.txt", "a?b", "a%3Fb",
              "a%23b", "a+b", "a%20b", "~user", "con", "nul.txt", "a" * 200 + "/" + "b" * 200]


def _tree(root: Path) -> dict[str, int]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = 0 if p.is_dir() else p.stat().st_size
    return out


@pytest.fixture(scope="module")
def file_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    root = tmp_path_factory.mktemp("fileroot")
    (root / "secret.txt").write_bytes(SECRET)
    (root / "sibling").mkdir()
    (root / "sibling" / "secret.txt").write_bytes(SECRET)
    store = root / "store"
    with running_gateway(f"file://{store}", [*SMALL]) as g:
        yield g, root


def test_path_tricks_file_backend(file_gw: tuple[Gateway, Path], counter: list[int],
                                  reliability_report: Report) -> None:
    g, root = file_gw
    c = client(g, "admin", counter)
    outside_before = {k: v for k, v in _tree(root).items() if not k.startswith("store")}
    faults = 0
    seen: list[Response] = []

    def go(method: str, target: str, body: bytes = b"") -> Response:
        r = check(c(method, target, body))
        assert SECRET not in r.body
        seen.append(r)
        return r

    for b in BUCKET_TRICKS:
        faults += 1
        created = go("PUT", f"/{b}").status == 200
        go("PUT", f"/{b}/k", b"data")
        go("GET", f"/{b}/k")
        go("GET", f"/{b}/secret.txt")
        go("GET", f"/{b}?list-type=2")
        go("HEAD", f"/{b}")
        if created:  # only names S3 accepts, decoded: e.g. 'aa' is too short, 'x'*63 is fine
            go("DELETE", f"/{b}/k")
            assert go("DELETE", f"/{b}").status == 204
    bucket = f"paths-{RID}"
    assert go("PUT", f"/{bucket}").status == 200
    stored: dict[str, bytes] = {}
    for i, k in enumerate(KEY_TRICKS):
        faults += 1
        data = f"value-{i}".encode()
        r = go("PUT", f"/{bucket}/{k}", data)
        if r.status == 200:
            got = go("GET", f"/{bucket}/{k}")
            assert got.body == data, (k, got)
            stored[k] = data
        elif "?" in k:  # a raw '?' starts the query: 'b' is no parameter PutObject takes
            assert (r.status, r.code) == (501, "NotImplemented"), (k, r)
        else:
            assert r.status == 400, (k, r)
            assert r.code in ("InvalidArgument", "KeyTooLongError", "InvalidURI"), (k, r)
            assert go("GET", f"/{bucket}/{k}").status in (400, 404)
        go("HEAD", f"/{bucket}/{k}")
    # what must be refused
    from urllib.parse import unquote

    for k in KEY_TRICKS:
        key = unquote(k, errors="surrogateescape")
        parts = key.split("/")
        must_refuse = (".." in parts or "." in parts or len(key.encode("utf-8", "surrogateescape"))
                       > 1024 or any(ord(ch) < 32 or ord(ch) == 0x7f for ch in key)
                       or "\udcff" in key or "\udcc0" in key
                       or "?" in k)  # the allow-list: PUT /b/a?b is not a PutObject
        assert (k not in stored) == must_refuse, (k, must_refuse)
    # unicode normalisation: keys are bytes; NFC and NFD forms are two keys, each exact
    nfc, nfd = "caf%C3%A9", "cafe%CC%81"
    assert unicodedata.normalize("NFC", "cafe\u0301") == "caf\u00e9"
    assert stored[nfc] != stored[nfd]
    assert go("GET", f"/{bucket}/{nfc}").body == stored[nfc]
    assert go("GET", f"/{bucket}/{nfd}").body == stored[nfd]
    # every stored key is listed exactly once, as sent (decoded)
    listing = go("GET", f"/{bucket}?list-type=2&encoding-type=url").body.decode()
    listed = sorted(unquote(x.split("</Key>")[0]) for x in listing.split("<Key>")[1:])
    # as sent: '?' starts the query and '#' a fragment, so 'a?b' and 'a#b' both name 'a'
    assert listed == sorted({unquote(k.split("?")[0].split("#")[0]) for k in stored}), listed
    # header injection through a key never reaches a response header
    for r in seen:
        assert "set-cookie" not in r.headers
    # flush: the store writes its segments; then nothing outside store/ changed
    flush = c("POST", "/v1/flush")
    assert flush.status == 200, flush
    outside_after = {k: v for k, v in _tree(root).items() if not k.startswith("store")}
    assert outside_after == outside_before
    for p in (root / "store").rglob("*"):
        assert p.resolve().is_relative_to((root / "store").resolve()), p
        assert not p.is_symlink(), p
    assert (root / "secret.txt").read_bytes() == SECRET
    reliability_report.record(
        "security", "path tricks in bucket and key names on the file backend (.., %2e%2e, "
        "//, encoded slashes, NUL, unicode forms, > 1024 bytes)", faults=faults,
        requests=counter[0], note=f"{len(stored)} odd keys stored exactly; nothing outside "
        "the store dir touched")


# -- oversized headers and bodies ------------------------------------------------------------------

def _alive(g: Gateway) -> None:
    with urllib.request.urlopen(g.endpoint + "/healthz", timeout=5) as r:
        assert r.status == 200


def test_oversized_headers(gw: Gateway, counter: list[int], reliability_report: Report) -> None:
    a = client(gw, "team-a", counter)
    cases: list[tuple[str, str, list[tuple[str, str]]]] = [
        ("header value 64 KiB", f"/{A_BUCKET}/k", [("x-amz-meta-big", "v" * 65536)]),
        ("header name 16 KiB", f"/{A_BUCKET}/k", [("x" * 16384, "v")]),
        ("1000 headers", f"/{A_BUCKET}/k", [(f"x-amz-meta-h{i}", "v") for i in range(1000)]),
        ("URL 64 KiB", f"/{A_BUCKET}/" + "k" * 65536, []),
        ("query 64 KiB", f"/{A_BUCKET}?list-type=2&prefix=" + "p" * 65536, []),
        ("Authorization 64 KiB", f"/{A_BUCKET}/k", [("Authorization", "AWS4-HMAC-SHA256 " +
                                                     "Credential=x," * 5000)]),
        ("Range 8 KiB", f"/{A_BUCKET}/k", [("Range", "bytes=" + "1" * 8000 + "-")]),
    ]
    for name, target, headers in cases:
        counter[0] += 1
        r = send(gw.port, "GET", target, headers)
        assert 400 <= r.status < 500, (name, r.status, r.body[:200])
        _alive(gw)
    # a signed request with a huge signed header: refused as a 4xx before any auth work
    hs = sign("GET", f"/{A_BUCKET}/k", a.host, a.access, a.secret,
              headers={"x-amz-meta-big": "v" * 9000})
    counter[0] += 1
    assert 400 <= send(gw.port, "GET", f"/{A_BUCKET}/k", hs).status < 500
    reliability_report.record("security", "oversized headers, names, URLs, header counts",
                              faults=len(cases) + 1, requests=counter[0])


class RssSampler:
    def __init__(self, g: Gateway) -> None:
        self.g, self.peak, self._stop = g, g.rss_bytes(), threading.Event()
        self.base = self.peak
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.g.rss_bytes())

    def __enter__(self) -> RssSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _stream_body(port: int, head: bytes, total: int, piece: bytes, *,
                 chunked: bool = False) -> tuple[Response, int]:
    """Send ``head`` then up to ``total`` bytes; stop when the server answers or hangs up."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        s.settimeout(0.0)
        try:
            while sent < total:
                try:
                    if s.recv(1, socket.MSG_PEEK):
                        break  # the answer is here
                except BlockingIOError:
                    pass
                data = (b"%x\r\n" % len(piece) + piece + b"\r\n") if chunked else piece
                s.settimeout(30)
                s.sendall(data)
                s.settimeout(0.0)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.settimeout(30)
        return rawhttp.read_response(s), sent


def test_oversized_bodies(gw: Gateway, counter: list[int], reliability_report: Report) -> None:
    a = client(gw, "team-a", counter)
    a("PUT", f"/{A_BUCKET}")
    huge = 1 << 30
    piece = b"\0" * (1 << 20)
    results = []
    with RssSampler(gw) as rss:
        # declared too large: refused before a byte of the body is read
        hs = sign("PUT", f"/{A_BUCKET}/big", a.host, a.access, a.secret,
                  payload=rawhttp.UNSIGNED)
        head = (f"PUT /{A_BUCKET}/big HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hs.items()) + f"Content-Length: {huge}\r\n\r\n").encode()
        t0 = time.monotonic()
        r, sent = _stream_body(gw.port, head, huge, piece)
        results.append(("declared 1 GiB", r, sent, time.monotonic() - t0))
        # undeclared (Transfer-Encoding: chunked): cut off once past --max-block-size
        head_c = head.replace(f"Content-Length: {huge}".encode(), b"Transfer-Encoding: chunked")
        r, sent = _stream_body(gw.port, head_c, 256 << 20, piece, chunked=True)
        results.append(("chunked, undeclared", r, sent, 0.0))
        # aws-chunked with a huge decoded length
        hs2 = sign("PUT", f"/{A_BUCKET}/big", a.host, a.access, a.secret,
                   payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                   headers={"content-encoding": "aws-chunked",
                            "x-amz-decoded-content-length": str(huge)})
        head2 = (f"PUT /{A_BUCKET}/big HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hs2.items()) + f"Content-Length: {huge}\r\n\r\n").encode()
        r, sent = _stream_body(gw.port, head2, huge, piece)
        results.append(("aws-chunked 1 GiB decoded", r, sent, 0.0))
        # aws-chunked, decoded length not declared, frames streaming past the limit
        hs3 = sign("PUT", f"/{A_BUCKET}/big", a.host, a.access, a.secret,
                   payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                   headers={"content-encoding": "aws-chunked"})
        head3 = (f"PUT /{A_BUCKET}/big HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hs3.items()) + "Transfer-Encoding: chunked\r\n\r\n"
                 ).encode()
        frame = b"%x\r\n" % len(piece) + piece + b"\r\n"
        r, sent = _stream_body(gw.port, head3, 256 << 20, frame, chunked=True)
        results.append(("aws-chunked frames, undeclared", r, sent, 0.0))
        # a multipart upload growing past the block size, and a batch-put body
        up = a("POST", f"/{A_BUCKET}/mp?uploads").body.split(b"<UploadId>")[1]
        upload = up.split(b"</UploadId>")[0].decode()
        part = b"p" * (3 << 20)
        assert a("PUT", f"/{A_BUCKET}/mp?partNumber=1&uploadId={upload}", part).status == 200
        r = a("PUT", f"/{A_BUCKET}/mp?partNumber=2&uploadId={upload}", part)
        results.append(("multipart total over the limit", r, len(part), 0.0))
        hs4 = {"Host": a.host, "Authorization": f"Bearer {a.access}:{a.secret}"}
        head4 = (f"POST /v1/{A_BUCKET}/batch-put HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hs4.items()) + f"Content-Length: {huge}\r\n\r\n"
                 ).encode()
        r, sent = _stream_body(gw.port, head4, huge, piece)
        results.append(("batch-put 1 GiB", r, sent, 0.0))
    counter[0] += 5
    for name, r, sent, _ in results:
        check(r, native="batch-put" in name)
        assert (r.status, r.code) == (400, "EntityTooLarge"), (name, r)
        # never read all of it: at most the block limit plus what sat in socket buffers
        assert sent <= MAX_BLOCK + (48 << 20), (name, sent)
    assert results[0][3] < 10
    grown = (rss.peak - rss.base) / 2**20
    assert grown < 64, f"gateway RSS grew {grown:.0f} MiB while refusing oversized bodies"
    assert a("HEAD", f"/{A_BUCKET}/big").status == 404
    _alive(gw)
    reliability_report.record(
        "security", "oversized bodies (declared, chunked, aws-chunked, multipart, batch-put)",
        faults=len(results), requests=counter[0], peak_rss_mib=rss.peak / 2**20,
        note=f"RSS grew {grown:.0f} MiB")


def test_hash_of_signed_payload_is_checked_before_storing(gw: Gateway, counter: list[int],
                                                          reliability_report: Report) -> None:
    """A body that does not match its signed hash is never stored (no partial state)."""
    a = client(gw, "team-a", counter)
    target = f"/{A_BUCKET}/hashcheck"
    hs = sign("PUT", target, a.host, a.access, a.secret, body=b"a" * 1000)
    hs["x-amz-content-sha256"] = hashlib.sha256(b"b" * 1000).hexdigest()
    counter[0] += 1
    r = check(send(gw.port, "PUT", target, hs, b"b" * 1000))
    assert r.status == 403  # the header is signed: changing it breaks the signature
    hs = sign("PUT", target, a.host, a.access, a.secret, body=b"a" * 1000)
    counter[0] += 1
    assert check(send(gw.port, "PUT", target, hs, b"b" * 1000)).code == \
        "XAmzContentSHA256Mismatch"
    assert a("HEAD", target).status == 404
    reliability_report.record("security", "signed payload hash mismatch stores nothing",
                              faults=2, requests=counter[0])
