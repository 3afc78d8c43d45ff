"""`s3kv doctor --setup`: create the bucket if missing and apply s3kv's lifecycle rules."""

from __future__ import annotations

import urllib3
from minio.commonconfig import ENABLED, Filter
from minio.error import MinioException, S3Error
from minio.lifecycleconfig import (
    AbortIncompleteMultipartUpload,
    Expiration,
    LifecycleConfig,
    Rule,
)

from s3kv.doctor.connect import http_pool, minio_client, network_problem, s3_problem
from s3kv.doctor.report import FAIL, Check, Runner, Target

#: lifecycle rule ids s3kv owns; `--setup` replaces these and keeps every other rule
RULE_EXPIRE = "s3kv-expire"
RULE_ABORT = "s3kv-abort-incomplete-multipart"


def setup(target: Target, *, expire_days: int, abort_days: int) -> list[Check]:
    """Create the bucket if missing and apply s3kv's lifecycle rules (other rules are kept)."""
    run = Runner()
    http = http_pool(target.timeout, target.verify_tls)
    client = minio_client(target, target.endpoints[0], http)
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
                chk.detail, chk.fix = s3_problem(exc, target, f"CreateBucket {target.bucket}")
            except urllib3.exceptions.HTTPError as exc:
                chk.status = FAIL
                chk.detail, chk.fix = network_problem(exc, target.endpoints[0],
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
                chk.detail, chk.fix = s3_problem(exc, target, "PutBucketLifecycle")
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
