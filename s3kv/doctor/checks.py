"""The checks of `s3kv doctor`, in order, and :func:`run_checks` that runs them (a check that
needs an earlier one to pass is skipped when it did not)."""

from __future__ import annotations

import email.utils
import os
import time
import uuid
from collections.abc import Callable, Mapping

import urllib3
from minio import Minio
from minio.commonconfig import ENABLED
from minio.error import MinioException, S3Error

from s3kv.doctor.connect import (
    S3Failure,
    http_pool,
    minio_client,
    network_problem,
    s3_problem,
    setup_hint,
)
from s3kv.doctor.multipart import Multipart
from s3kv.doctor.report import FAIL, SKIP, WARN, Check, Report, Runner, Target
from s3kv.sizes import MiB

#: S3's minimum size of a multipart part other than the last
MIN_PART_SIZE = 5 * MiB
#: SigV4: S3 and MinIO reject requests signed more than this far from their clock
SIGV4_MAX_SKEW = 15 * 60


def _probe(http: urllib3.PoolManager, endpoint: str, path: str = "/"
           ) -> tuple[int, Mapping[str, str], float, float]:
    """One unsigned GET: (status, headers, local time at send, local time at answer)."""
    sent = time.time()
    resp = http.request("GET", endpoint.rstrip("/") + path, preload_content=True)
    return resp.status, resp.headers, sent, time.time()


def check_reachable(run: Runner, target: Target, http: urllib3.PoolManager,
                    now: Callable[[], float]) -> None:
    for endpoint in target.endpoints:
        with run.check("reachable") as chk:
            try:
                status, headers, sent, answered = _probe(http, endpoint)
            except urllib3.exceptions.HTTPError as exc:
                chk.status = FAIL
                chk.detail, chk.fix = network_problem(exc, endpoint, target.timeout)
                continue
            server = headers.get("Server", "unknown server")
            chk.detail = (f"{endpoint} answered HTTP {status} in "
                          f"{(answered - sent) * 1000:.0f} ms ({server})")
        _check_clock(run, target, endpoint, headers.get("Date"), (sent + answered) / 2, now)


def _check_clock(run: Runner, target: Target, endpoint: str, date: str | None,
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


def check_cluster(run: Runner, target: Target, http: urllib3.PoolManager) -> None:
    endpoint = target.endpoints[0]
    with run.check("cluster") as chk:
        try:
            status, headers, _, _ = _probe(http, endpoint, "/minio/health/cluster")
        except urllib3.exceptions.HTTPError as exc:
            chk.status = FAIL
            chk.detail, chk.fix = network_problem(exc, endpoint, target.timeout)
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


def check_credentials(run: Runner, target: Target, client: Minio) -> None:
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
            chk.detail, chk.fix = s3_problem(exc, target, "ListBuckets")
        except (MinioException, urllib3.exceptions.HTTPError) as exc:
            chk.status = FAIL
            chk.detail, chk.fix = f"ListBuckets failed: {exc}", "see the server's log"


def check_bucket(run: Runner, target: Target, client: Minio) -> None:
    with run.check("bucket") as chk:
        try:
            exists = client.bucket_exists(target.bucket)
        except S3Error as exc:
            chk.status = FAIL
            chk.detail, chk.fix = s3_problem(exc, target, f"HeadBucket {target.bucket}")
            return
        except (MinioException, urllib3.exceptions.HTTPError) as exc:
            chk.status = FAIL
            chk.detail, chk.fix = f"HeadBucket failed: {exc}", "see the server's log"
            return
        if not exists:
            chk.status = FAIL
            chk.detail = f"bucket {target.bucket} does not exist"
            chk.fix = setup_hint(target)
            return
        chk.detail = f"bucket {target.bucket} exists and is accessible"


def check_versioning(run: Runner, target: Target, client: Minio) -> None:
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


def check_lifecycle(run: Runner, target: Target, client: Minio) -> None:
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
            chk.fix = setup_hint(target)
            return
        chk.detail = "; ".join(parts)


def check_multipart_and_range(run: Runner, target: Target, client: Minio,
                              multipart: Multipart) -> None:
    """Complete a two-part upload, read a range across the part boundary, abort another."""
    key = f"{target.prefix}.s3kv-doctor/{uuid.uuid4().hex}"
    first = os.urandom(MIN_PART_SIZE)
    second = os.urandom(64 * 1024)
    completed = False
    with run.check("multipart") as chk:
        upload_id = ""
        try:
            upload_id = multipart.create(key)
            etags = [multipart.upload_part(key, upload_id, n, data)
                     for n, data in ((1, first), (2, second))]
            multipart.complete(key, upload_id, etags)
            upload_id = ""
            completed = True
            size = client.stat_object(target.bucket, key).size
            if size != len(first) + len(second):
                chk.status = FAIL
                chk.detail = (f"completed upload has {size} bytes, expected "
                              f"{len(first) + len(second)}")
                chk.fix = "the server does not implement multipart uploads faithfully"
                return
            spare = multipart.create(key + ".abort")
            multipart.upload_part(key + ".abort", spare, 1, b"x" * 1024)
            multipart.abort(key + ".abort", spare)
            chk.detail = (f"2-part upload of {size} bytes completed and a second upload "
                          f"aborted under {target.bucket}/{target.prefix}.s3kv-doctor/")
        except (S3Error, S3Failure) as exc:
            chk.status = FAIL
            chk.detail, chk.fix = s3_problem(exc, target, "multipart upload")
        except (MinioException, urllib3.exceptions.HTTPError) as exc:
            chk.status = FAIL
            chk.detail, chk.fix = f"multipart upload failed: {exc}", "see the server's log"
        finally:
            if upload_id:
                try:
                    multipart.abort(key, upload_id)
                except (S3Failure, urllib3.exceptions.HTTPError):
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
                chk.detail, chk.fix = s3_problem(exc, target, "ranged GET")
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
    run = Runner()
    http = http_pool(target.timeout, target.verify_tls)
    try:
        check_reachable(run, target, http, now)
        if run.checks[0].status == FAIL:  # the first endpoint carries every S3 check
            for name in ("cluster", "credentials", "bucket", "versioning", "lifecycle",
                         "multipart", "ranged-get"):
                run.skip(name, f"needs a reachable {target.endpoints[0]}")
            return Report(target, run.checks)
        check_cluster(run, target, http)
        client = minio_client(target, target.endpoints[0], http)
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
        check_multipart_and_range(run, target, client, Multipart(target, http))
        return Report(target, run.checks)
    finally:
        http.clear()

