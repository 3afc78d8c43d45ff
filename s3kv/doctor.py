"""Checks of a live S3/MinIO endpoint for s3kv, and its one-time set-up (`s3kv doctor`).

Every check says OK, WARN, FAIL or SKIP, what it saw, and for anything but OK how to fix it.
All S3 calls go through the ``minio`` SDK (DESIGN.md: the minio SDK does administration and
health checks), with retries off and short timeouts so a dead endpoint is reported in seconds.

The checks, in order (a check that needs an earlier one to pass is skipped when it did not):

1. ``reachable``   an unsigned HTTP request to each endpoint gets an HTTP answer;
2. ``clock``       the server's ``Date`` header against this host's clock (SigV4 requests are
                   rejected beyond 15 minutes of skew; TTLs and lifecycle rules drift before that);
3. ``cluster``     MinIO's ``/minio/health/cluster`` (write quorum), skipped on other servers;
4. ``credentials`` a signed ListBuckets: the access key is known and the secret key matches;
5. ``bucket``      the bucket exists and these credentials may use it;
6. ``versioning``  a versioned bucket keeps evicted segments as noncurrent versions (WARN);
7. ``lifecycle``   a rule aborts incomplete multipart uploads (WARN when missing);
8. ``multipart``   create, upload two parts, complete, and abort a second upload;
9. ``ranged-get``  a range across the part boundary of that object reads back byte for byte;
   the test object is deleted afterwards.
"""

from __future__ import annotations

import configparser
import email.utils
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import urllib3
from minio import Minio
from minio.commonconfig import ENABLED, Filter
from minio.datatypes import Part
from minio.error import MinioException, S3Error
from minio.lifecycleconfig import (
    AbortIncompleteMultipartUpload,
    Expiration,
    LifecycleConfig,
    Rule,
)

from s3kv.errors import ConfigError
from s3kv.sizes import MiB

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"

#: S3's minimum size of a multipart part other than the last
MIN_PART_SIZE = 5 * MiB
#: lifecycle rule ids s3kv owns; `--setup` replaces these and keeps every other rule
RULE_EXPIRE = "s3kv-expire"
RULE_ABORT = "s3kv-abort-incomplete-multipart"
#: SigV4: S3 and MinIO reject requests signed more than this far from their clock
SIGV4_MAX_SKEW = 15 * 60


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""
    seconds: float = 0.0


@dataclass
class Target:
    """What to check: endpoints (the first one carries the S3 checks), bucket, prefix, keys."""

    endpoints: list[str]
    bucket: str
    prefix: str = ""
    region: str = "us-east-1"
    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    session_token: str = field(default="", repr=False)
    credentials_from: str = ""
    timeout: float = 5.0
    max_skew: float = 60.0
    verify_tls: bool = True


@dataclass
class Report:
    target: Target
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "endpoints": self.target.endpoints,
            "bucket": self.target.bucket,
            "prefix": self.target.prefix,
            "region": self.target.region,
            "credentials_from": self.target.credentials_from,
            "checks": [asdict(c) for c in self.checks],
        }

    def to_text(self) -> str:
        t = self.target
        lines = [f"s3kv doctor: {', '.join(t.endpoints)}  bucket {t.bucket}"
                 + (f"  prefix {t.prefix}" if t.prefix else "")]
        for c in self.checks:
            lines.append(f"  {c.status:<5} {c.name:<12} {c.detail}")
            if c.fix and c.status != OK:
                lines.append(f"  {'':<5} {'':<12} fix: {c.fix}")
        counts = {s: sum(1 for c in self.checks if c.status == s) for s in (OK, WARN, FAIL, SKIP)}
        lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n)
                     + ("" if self.ok else "  -> not ready for s3kv"))
        return "\n".join(lines)


# ---- inputs ---------------------------------------------------------------------------------

def parse_store_url(url: str) -> tuple[str, str, list[str]]:
    """``s3://BUCKET/PREFIX?endpoint=URL[,URL...]`` -> (bucket, prefix, endpoints)."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigError(f"store URL {url!r} is not s3://BUCKET/PREFIX?endpoint=URL[,URL...] "
                          "(doctor checks S3 stores; a file:// store needs no checks)")
    query = parse_qs(parts.query)
    endpoints = [e for v in query.get("endpoint", []) for e in v.split(",") if e]
    return parts.netloc, parts.path.lstrip("/"), endpoints


def split_endpoint(url: str) -> tuple[str, bool]:
    """``http://host:9000`` -> (``host:9000``, secure)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"endpoint {url!r} is not an http:// or https:// URL")
    if parts.path not in ("", "/") or parts.query:
        raise ConfigError(f"endpoint {url!r} must be scheme://host[:port] only (no path): "
                          "buckets are addressed path-style below it")
    return parts.netloc, parts.scheme == "https"


def resolve_credentials(env: Mapping[str, str], profile: str | None = None
                        ) -> tuple[str, str, str, str]:
    """(access key, secret key, session token, where from): the standard AWS variables first,
    then the shared credentials file's profile. Never the instance metadata service."""
    access = env.get("AWS_ACCESS_KEY_ID", "")
    secret = env.get("AWS_SECRET_ACCESS_KEY", "")
    if access and secret and not profile:
        return access, secret, env.get("AWS_SESSION_TOKEN", ""), "environment"
    name = profile or env.get("AWS_PROFILE") or "default"
    path = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials")
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
    except configparser.Error as exc:
        raise ConfigError(f"cannot read AWS credentials file {path}: {exc}") from None
    if parser.has_section(name):
        sec = parser[name]
        access = sec.get("aws_access_key_id", "")
        secret = sec.get("aws_secret_access_key", "")
        if access and secret:
            return access, secret, sec.get("aws_session_token", ""), f"profile {name} ({path})"
    if profile:
        raise ConfigError(f"profile {profile!r} has no keys in {path}")
    return "", "", "", "none"


# ---- running checks -------------------------------------------------------------------------

def _http(timeout: float, verify_tls: bool) -> urllib3.PoolManager:
    return urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=timeout, read=timeout),
        retries=False,
        cert_reqs="CERT_REQUIRED" if verify_tls else "CERT_NONE",
    )


def _client(target: Target, endpoint: str, http: urllib3.PoolManager) -> Minio:
    host, secure = split_endpoint(endpoint)
    return Minio(host, access_key=target.access_key or None,
                 secret_key=target.secret_key or None,
                 session_token=target.session_token or None, secure=secure,
                 region=target.region, http_client=http, cert_check=target.verify_tls)


def _network_problem(exc: BaseException, endpoint: str, timeout: float) -> tuple[str, str]:
    """(what is wrong, how to fix it) for a transport-level failure."""
    reason: BaseException = exc
    while isinstance(reason, urllib3.exceptions.MaxRetryError) and reason.reason is not None:
        reason = reason.reason
    text = str(reason)
    host = urlsplit(endpoint).netloc
    if isinstance(reason, urllib3.exceptions.NameResolutionError) or "resolve" in text.lower():
        return (f"cannot resolve the host of {endpoint}",
                "check the host name in --endpoint (in Kubernetes: the Service name and "
                "namespace, e.g. http://minio.minio.svc:9000) and DNS")
    if "refused" in text.lower() or isinstance(reason, ConnectionRefusedError):
        return (f"connection refused: nothing listens on {host}",
                "check the port in --endpoint and that the server runs there (MinIO: "
                "`systemctl status minio` on the node, or the Service/Pod in Kubernetes)")
    if isinstance(reason, (urllib3.exceptions.ConnectTimeoutError,
                           urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        return (f"no answer from {host} within {timeout:g}s",
                "the host is up but silent: check firewalls/NetworkPolicy between here and "
                "the endpoint, that the port is the S3 API port (MinIO: 9000, not the console "
                "9001), and the server's load; raise --timeout if it is merely slow")
    if isinstance(reason, urllib3.exceptions.SSLError):
        return (f"TLS handshake with {host} failed: {text}",
                "use http:// for a plain-HTTP endpoint, or trust the server's CA "
                "(SSL_CERT_FILE), or --insecure for a test cluster")
    return (f"cannot reach {host}: {text}",
            "check --endpoint, the network path and that the server is running")


_CRED_FIXES = {
    "InvalidAccessKeyId": ("the server does not know the access key {key}",
                           "set AWS_ACCESS_KEY_ID to a key that exists on this server (MinIO: "
                           "`mc admin user list ALIAS`; the root user is MINIO_ROOT_USER)"),
    "SignatureDoesNotMatch": ("the secret key does not match the access key {key}",
                              "set AWS_SECRET_ACCESS_KEY to that key's secret (in Kubernetes: "
                              "the chart's Secret / existingSecret), and check --region"),
    "RequestTimeTooSkewed": ("the server rejected the request for clock skew",
                             "synchronise this host's clock (chrony/NTP) with the server's"),
    "ExpiredToken": ("the session token has expired", "refresh the temporary credentials"),
    "InvalidToken": ("the session token is invalid", "unset AWS_SESSION_TOKEN or refresh it"),
    "AuthorizationHeaderMalformed": ("the server rejected the signing region",
                                     "pass --region with the server's region (MinIO default: "
                                     "us-east-1, or its MINIO_SITE_REGION)"),
}


def _s3_problem(exc: S3Error, target: Target, what: str) -> tuple[str, str]:
    code = exc.code or ""
    if code in _CRED_FIXES:
        detail, fix = _CRED_FIXES[code]
        return detail.format(key=target.access_key), fix
    if code == "AccessDenied":
        return (f"{what}: access denied for key {target.access_key}",
                f"grant the key's policy s3:GetObject, s3:PutObject, s3:DeleteObject, "
                f"s3:ListBucket, s3:AbortMultipartUpload and s3:ListMultipartUploadParts on "
                f"arn:aws:s3:::{target.bucket} and arn:aws:s3:::{target.bucket}/*")
    if code == "NoSuchBucket":
        return f"bucket {target.bucket} does not exist", _setup_hint(target)
    return f"{what}: {code or 'error'}: {exc.message}", "see the server's log for this request"


def _setup_hint(target: Target) -> str:
    return (f"run s3kv doctor --setup --endpoint "
            f"{target.endpoints[0]} --bucket {target.bucket}"
            + (f" --prefix {target.prefix}" if target.prefix else "")
            + " (creates the bucket if missing, applies s3kv's lifecycle rules)")


class _Runner:
    def __init__(self) -> None:
        self.checks: list[Check] = []

    @contextmanager
    def check(self, name: str) -> Iterator[Check]:
        chk = Check(name, OK, "")
        start = time.perf_counter()
        try:
            yield chk
        finally:
            chk.seconds = round(time.perf_counter() - start, 4)
            self.checks.append(chk)

    def skip(self, name: str, why: str) -> None:
        self.checks.append(Check(name, SKIP, why))

    def passed(self, name: str) -> bool:
        return any(c.name == name and c.status in (OK, WARN) for c in self.checks)


def _probe(http: urllib3.PoolManager, endpoint: str, path: str = "/"
           ) -> tuple[int, Mapping[str, str], float, float]:
    """One unsigned GET: (status, headers, local time at send, local time at answer)."""
    sent = time.time()
    resp = http.request("GET", endpoint.rstrip("/") + path, preload_content=True)
    return resp.status, resp.headers, sent, time.time()


def check_reachable(run: _Runner, target: Target, http: urllib3.PoolManager,
                    now: Callable[[], float]) -> None:
    for endpoint in target.endpoints:
        with run.check("reachable") as chk:
            try:
                status, headers, sent, answered = _probe(http, endpoint)
            except urllib3.exceptions.HTTPError as exc:
                chk.status = FAIL
                chk.detail, chk.fix = _network_problem(exc, endpoint, target.timeout)
                continue
            server = headers.get("Server", "unknown server")
            chk.detail = (f"{endpoint} answered HTTP {status} in "
                          f"{(answered - sent) * 1000:.0f} ms ({server})")
        _check_clock(run, target, endpoint, headers.get("Date"), (sent + answered) / 2, now)


def _check_clock(run: _Runner, target: Target, endpoint: str, date: str | None,
                 local_mid: float, now: Callable[[], float]) -> None:
    with run.check("clock") as chk:
        if not date:
            chk.status = WARN
            chk.detail = f"{endpoint} sent no Date header; clock skew not measured"
            chk.fix = "compare the clocks by hand (chronyc tracking on both hosts)"
            return
        try:
            server = email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            chk.status = WARN
            chk.detail = f"{endpoint} sent an unreadable Date header {date!r}"
            return
        # `now` lets tests shift this host's clock; by default it is time.time
        skew = server - (local_mid + (now() - time.time()))
        ahead = "ahead of" if skew > 0 else "behind"
        chk.detail = (f"server clock {abs(skew):.0f}s {ahead} this host "
                      f"(Date header, 1s resolution)")
        fix = ("synchronise both clocks with NTP (chrony): `chronyc tracking` on this host "
               "and on the MinIO nodes")
        if abs(skew) >= SIGV4_MAX_SKEW:
            chk.status = FAIL
            chk.detail += "; signed requests are rejected (RequestTimeTooSkewed)"
            chk.fix = fix
        elif abs(skew) >= target.max_skew:
            chk.status = FAIL
            chk.detail += (f", over --max-skew {target.max_skew:g}s: TTL eviction and "
                           "lifecycle expiry drift between gateways and the cluster")
            chk.fix = fix
        elif abs(skew) > 2:
            chk.status = WARN
            chk.fix = fix


def check_cluster(run: _Runner, target: Target, http: urllib3.PoolManager) -> None:
    endpoint = target.endpoints[0]
    with run.check("cluster") as chk:
        try:
            status, headers, _, _ = _probe(http, endpoint, "/minio/health/cluster")
        except urllib3.exceptions.HTTPError as exc:
            chk.status = FAIL
            chk.detail, chk.fix = _network_problem(exc, endpoint, target.timeout)
            return
        quorum = headers.get("X-Minio-Write-Quorum")
        if status == 200 and quorum is not None:
            chk.detail = f"MinIO cluster healthy (write quorum {quorum} drives per set)"
        elif status == 503:
            chk.status = FAIL
            chk.detail = "MinIO reports the cluster below write quorum: PUTs will fail"
            chk.fix = ("bring the offline nodes/drives back (`mc admin info ALIAS`); while "
                       "below quorum the gateway answers 503 SlowDown to PUTs")
        else:
            chk.status = SKIP
            chk.detail = f"not a MinIO endpoint (HTTP {status} on /minio/health/cluster)"


def check_credentials(run: _Runner, target: Target, client: Minio) -> None:
    with run.check("credentials") as chk:
        if not target.access_key:
            chk.status = FAIL
            chk.detail = "no credentials found"
            chk.fix = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE with "
                       "~/.aws/credentials), as for any S3 tool")
            return
        try:
            client.list_buckets()
            chk.detail = f"key {target.access_key} accepted (from {target.credentials_from})"
        except S3Error as exc:
            if exc.code == "AccessDenied":
                chk.detail = (f"key {target.access_key} accepted; its policy does not allow "
                              "ListBuckets (s3kv does not need it)")
                return
            chk.status = FAIL
            chk.detail, chk.fix = _s3_problem(exc, target, "ListBuckets")
        except (MinioException, urllib3.exceptions.HTTPError) as exc:
            chk.status = FAIL
            chk.detail, chk.fix = f"ListBuckets failed: {exc}", "see the server's log"


def check_bucket(run: _Runner, target: Target, client: Minio) -> None:
    with run.check("bucket") as chk:
        try:
            exists = client.bucket_exists(target.bucket)
        except S3Error as exc:
            chk.status = FAIL
            chk.detail, chk.fix = _s3_problem(exc, target, f"HeadBucket {target.bucket}")
            return
        except (MinioException, urllib3.exceptions.HTTPError) as exc:
            chk.status = FAIL
            chk.detail, chk.fix = f"HeadBucket failed: {exc}", "see the server's log"
            return
        if not exists:
            chk.status = FAIL
            chk.detail = f"bucket {target.bucket} does not exist"
            chk.fix = _setup_hint(target)
            return
        chk.detail = f"bucket {target.bucket} exists and is accessible"


def check_versioning(run: _Runner, target: Target, client: Minio) -> None:
    with run.check("versioning") as chk:
        try:
            status = client.get_bucket_versioning(target.bucket).status
        except (MinioException, urllib3.exceptions.HTTPError) as exc:
            chk.status = WARN
            chk.detail = f"cannot read the versioning state: {exc}"
            return
        if status == "Enabled":
            chk.status = WARN
            chk.detail = ("versioning is Enabled: evicted segments stay as noncurrent "
                          "versions and keep using capacity")
            chk.fix = (f"suspend it (`mc version suspend ALIAS/{target.bucket}`) or add a "
                       "NoncurrentVersionExpiration lifecycle rule")
        else:
            chk.detail = f"versioning {status or 'never enabled'}: deletes free capacity"


def check_lifecycle(run: _Runner, target: Target, client: Minio) -> None:
    with run.check("lifecycle") as chk:
        try:
            config = client.get_bucket_lifecycle(target.bucket)
        except (MinioException, urllib3.exceptions.HTTPError) as exc:
            chk.status = WARN
            chk.detail = f"cannot read lifecycle rules: {exc}"
            return
        rules = [r for r in (config.rules if config else []) if r.status == ENABLED]
        abort = [r for r in rules if r.abort_incomplete_multipart_upload is not None]
        expire = [r for r in rules if r.expiration is not None and r.expiration.days]
        parts = []
        if expire:
            parts.append("expiry after " + ", ".join(
                f"{r.expiration.days}d" for r in expire if r.expiration))
        if abort:
            parts.append("incomplete uploads aborted after " + ", ".join(
                f"{r.abort_incomplete_multipart_upload.days_after_initiation}d"
                for r in abort if r.abort_incomplete_multipart_upload))
        if not abort:
            chk.status = WARN
            chk.detail = ("no rule aborts incomplete multipart uploads: parts of uploads a "
                          "crashed gateway left behind use capacity until aborted")
            chk.fix = _setup_hint(target)
            return
        chk.detail = "; ".join(parts)


def check_multipart_and_range(run: _Runner, target: Target, client: Minio) -> None:
    """Complete a two-part upload, read a range across the part boundary, abort another."""
    key = f"{target.prefix}.s3kv-doctor/{uuid.uuid4().hex}"
    first = os.urandom(MIN_PART_SIZE)
    second = os.urandom(64 * 1024)
    completed = False
    with run.check("multipart") as chk:
        upload_id = ""
        try:
            upload_id = client._create_multipart_upload(target.bucket, key, {})
            etags = [client._upload_part(target.bucket, key, data, None, upload_id, n)
                     for n, data in ((1, first), (2, second))]
            client._complete_multipart_upload(
                target.bucket, key, upload_id,
                [Part(n, etag) for n, etag in enumerate(etags, start=1)])
            upload_id = ""
            completed = True
            size = client.stat_object(target.bucket, key).size
            if size != len(first) + len(second):
                chk.status = FAIL
                chk.detail = (f"completed upload has {size} bytes, expected "
                              f"{len(first) + len(second)}")
                chk.fix = "the server does not implement multipart uploads faithfully"
                return
            spare = client._create_multipart_upload(target.bucket, key + ".abort", {})
            client._upload_part(target.bucket, key + ".abort", b"x" * 1024, None, spare, 1)
            client._abort_multipart_upload(target.bucket, key + ".abort", spare)
            chk.detail = (f"2-part upload of {size} bytes completed and a second upload "
                          f"aborted under {target.bucket}/{target.prefix}.s3kv-doctor/")
        except S3Error as exc:
            chk.status = FAIL
            chk.detail, chk.fix = _s3_problem(exc, target, "multipart upload")
        except (MinioException, urllib3.exceptions.HTTPError) as exc:
            chk.status = FAIL
            chk.detail, chk.fix = f"multipart upload failed: {exc}", "see the server's log"
        finally:
            if upload_id:
                try:
                    client._abort_multipart_upload(target.bucket, key, upload_id)
                except (MinioException, urllib3.exceptions.HTTPError):
                    chk.detail += f"; could not abort upload {upload_id} of {key}"
    try:
        if not completed:
            run.skip("ranged-get", "needs the multipart object")
            return
        with run.check("ranged-get") as chk:
            offset, length = len(first) - 4096, 8192
            expected = (first + second)[offset:offset + length]
            try:
                resp = client.get_object(target.bucket, key, offset=offset, length=length)
                try:
                    got = resp.read()
                    status = resp.status
                finally:
                    resp.close()
                    resp.release_conn()
            except S3Error as exc:
                chk.status = FAIL
                chk.detail, chk.fix = _s3_problem(exc, target, "ranged GET")
                return
            except (MinioException, urllib3.exceptions.HTTPError) as exc:
                chk.status = FAIL
                chk.detail, chk.fix = f"ranged GET failed: {exc}", "see the server's log"
                return
            if status != 206 or got != expected:
                chk.status = FAIL
                chk.detail = (f"range bytes={offset}-{offset + length - 1} answered HTTP "
                              f"{status} with {len(got)} bytes "
                              f"({'matching' if got == expected else 'not matching'})")
                chk.fix = ("s3kv reads blocks as ranged GETs: the server (or a proxy in "
                           "front of it) must honour Range with 206 Partial Content")
                return
            chk.detail = (f"{length} bytes across the part boundary read back byte for byte "
                          f"(HTTP 206)")
    finally:
        if completed:
            try:
                client.remove_object(target.bucket, key)
            except (MinioException, urllib3.exceptions.HTTPError) as exc:
                run.checks.append(Check("cleanup", WARN, f"could not delete {key}: {exc}",
                                        f"delete it by hand: mc rm ALIAS/{target.bucket}/{key}"))


def run_checks(target: Target, *, now: Callable[[], float] = time.time) -> Report:
    run = _Runner()
    http = _http(target.timeout, target.verify_tls)
    try:
        check_reachable(run, target, http, now)
        if run.checks[0].status == FAIL:  # the first endpoint carries every S3 check
            for name in ("cluster", "credentials", "bucket", "versioning", "lifecycle",
                         "multipart", "ranged-get"):
                run.skip(name, f"needs a reachable {target.endpoints[0]}")
            return Report(target, run.checks)
        check_cluster(run, target, http)
        client = _client(target, target.endpoints[0], http)
        check_credentials(run, target, client)
        if not run.passed("credentials"):
            for name in ("bucket", "versioning", "lifecycle", "multipart", "ranged-get"):
                run.skip(name, "needs valid credentials")
            return Report(target, run.checks)
        check_bucket(run, target, client)
        if not run.passed("bucket"):
            for name in ("versioning", "lifecycle", "multipart", "ranged-get"):
                run.skip(name, "needs the bucket")
            return Report(target, run.checks)
        check_versioning(run, target, client)
        check_lifecycle(run, target, client)
        check_multipart_and_range(run, target, client)
        return Report(target, run.checks)
    finally:
        http.clear()


def setup(target: Target, *, expire_days: int, abort_days: int) -> list[Check]:
    """Create the bucket if missing and apply s3kv's lifecycle rules (other rules are kept)."""
    run = _Runner()
    http = _http(target.timeout, target.verify_tls)
    client = _client(target, target.endpoints[0], http)
    try:
        with run.check("setup-bucket") as chk:
            try:
                if client.bucket_exists(target.bucket):
                    chk.detail = f"bucket {target.bucket} already exists"
                else:
                    client.make_bucket(target.bucket)
                    chk.detail = f"created bucket {target.bucket}"
            except S3Error as exc:
                chk.status = FAIL
                chk.detail, chk.fix = _s3_problem(exc, target, f"CreateBucket {target.bucket}")
            except urllib3.exceptions.HTTPError as exc:
                chk.status = FAIL
                chk.detail, chk.fix = _network_problem(exc, target.endpoints[0],
                                                       target.timeout)
            except (MinioException, ValueError) as exc:
                chk.status = FAIL
                chk.detail = f"cannot create bucket {target.bucket}: {exc}"
                chk.fix = "bucket names are 3-63 lower-case letters, digits, '-' and '.'"
        if not run.passed("setup-bucket"):
            run.skip("setup-lifecycle", "needs the bucket")
            return run.checks
        with run.check("setup-lifecycle") as chk:
            try:
                current = client.get_bucket_lifecycle(target.bucket)
                kept = [r for r in (current.rules if current else [])
                        if r.rule_id not in (RULE_EXPIRE, RULE_ABORT)]
                ours = lifecycle_rules(target.prefix, expire_days, abort_days)
                client.set_bucket_lifecycle(target.bucket, LifecycleConfig(kept + ours))
                what = [f"incomplete multipart uploads aborted after {abort_days}d"]
                if expire_days:
                    what.insert(0, f"objects expire {expire_days}d after creation")
                scope = f"{target.bucket}/{target.prefix}" if target.prefix else target.bucket
                chk.detail = f"lifecycle on {scope}: " + ", ".join(what)
                if kept:
                    chk.detail += f" ({len(kept)} other rule(s) kept)"
            except S3Error as exc:
                chk.status = FAIL
                chk.detail, chk.fix = _s3_problem(exc, target, "PutBucketLifecycle")
                if exc.code in ("NotImplemented", "MalformedXML"):
                    chk.fix = "this server does not support lifecycle rules; skip --setup's " \
                              "rules and rely on the gateway's own eviction"
            except (MinioException, urllib3.exceptions.HTTPError) as exc:
                chk.status = FAIL
                chk.detail, chk.fix = f"PutBucketLifecycle failed: {exc}", "see the server's log"
        return run.checks
    finally:
        http.clear()


def lifecycle_rules(prefix: str, expire_days: int, abort_days: int) -> list[Rule]:
    rules = [Rule(ENABLED, rule_filter=Filter(prefix=prefix), rule_id=RULE_ABORT,
                  abort_incomplete_multipart_upload=AbortIncompleteMultipartUpload(
                      days_after_initiation=abort_days))]
    if expire_days:
        rules.insert(0, Rule(ENABLED, rule_filter=Filter(prefix=prefix), rule_id=RULE_EXPIRE,
                             expiration=Expiration(days=expire_days)))
    return rules
