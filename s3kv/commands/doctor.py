"""``s3kv doctor``: check a live S3/MinIO endpoint for s3kv, and set up its bucket (``--setup``).

The checks are in :mod:`s3kv.doctor`; this module turns flags and the environment into a
:class:`~s3kv.doctor.Target`, prints the report (text or ``--json``) and returns the exit code:
0 when nothing failed (warnings allowed), 1 when a check failed, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from s3kv.doctor import (
    FAIL,
    Check,
    Report,
    Target,
    parse_store_url,
    resolve_credentials,
    run_checks,
    setup,
    split_endpoint,
)
from s3kv.errors import ConfigError, InvalidNamespace
from s3kv.store.catalog import validate_namespace


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check a live S3/MinIO endpoint (reachability, credentials, bucket, multipart, "
             "ranged GET, clock skew); --setup creates the bucket and lifecycle rules",
        description=(
            "Check that an S3/MinIO endpoint is ready for s3kv: reachability of every endpoint, "
            "clock skew (from the server's Date header), MinIO cluster health, credentials, the "
            "bucket, versioning, lifecycle rules, a multipart upload round trip (two parts, "
            "complete, and an abort) and a ranged GET across its part boundary. The test object "
            "is deleted afterwards. Each check prints OK, WARN, FAIL or SKIP, what it saw, and "
            "how to fix it. Exit code 0 when nothing failed, 1 when a check failed. "
            "Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or a profile in "
            "~/.aws/credentials. Without --endpoint/--bucket, S3KV_STORE is read, so "
            "`kubectl exec deploy/s3kv -- s3kv doctor` checks the gateway's own backend."
        ),
    )
    p.add_argument("--endpoint", metavar="URL[,URL...]",
                   help="S3 endpoint(s), e.g. http://minio1:9000,http://minio2:9000; every one "
                        "is probed for reachability and clock, the first carries the S3 checks")
    p.add_argument("--bucket", help="bucket s3kv stores segments in")
    p.add_argument("--prefix", default=None,
                   help="key prefix inside the bucket (default: the store URL's, or none)")
    p.add_argument("--store", metavar="URL",
                   help="take endpoint, bucket and prefix from a store URL "
                        "s3://BUCKET/PREFIX?endpoint=URL[,URL...] [env S3KV_STORE]")
    p.add_argument("--region", default=None,
                   help="signing region [env AWS_REGION / AWS_DEFAULT_REGION; default us-east-1]")
    p.add_argument("--profile", default=None,
                   help="profile in the shared AWS credentials file instead of the environment")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                   help="connect/read timeout of each request (default 5)")
    p.add_argument("--max-skew", type=float, default=60.0, metavar="SECONDS",
                   help="clock skew that fails the clock check (default 60; S3 itself rejects "
                        "requests beyond 900)")
    p.add_argument("--insecure", action="store_true",
                   help="do not verify the TLS certificate of an https endpoint")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--setup", action="store_true",
                   help="first create the bucket if missing and apply s3kv's lifecycle rules "
                        "(abort incomplete multipart uploads; expiry with --expire-days), "
                        "keeping any other rules, then run the checks")
    p.add_argument("--expire-days", type=int, default=0, metavar="DAYS",
                   help="with --setup: expire objects under the prefix this many days after "
                        "they were written (0: no expiry rule; the gateway's own capacity/TTL "
                        "eviction stays in charge). Set it above the gateway's --ttl")
    p.add_argument("--abort-days", type=int, default=1, metavar="DAYS",
                   help="with --setup: abort multipart uploads left incomplete this many days "
                        "(default 1)")
    p.set_defaults(func=run)


def target_from_args(args: argparse.Namespace, env: dict[str, str] | None = None) -> Target:
    env = dict(os.environ) if env is None else env
    bucket, prefix = "", ""
    endpoints: list[str] = []
    store = args.store or ("" if (args.endpoint and args.bucket) else env.get("S3KV_STORE", ""))
    if store:
        bucket, prefix, endpoints = parse_store_url(store)
    if args.endpoint:
        endpoints = [e.strip() for e in args.endpoint.split(",") if e.strip()]
    if args.bucket:
        bucket = args.bucket
    if args.prefix is not None:
        prefix = args.prefix
    if not endpoints:
        raise ConfigError("no endpoint: pass --endpoint URL (or --store s3://BUCKET/PREFIX?"
                          "endpoint=URL, or set S3KV_STORE)")
    if not bucket:
        raise ConfigError("no bucket: pass --bucket NAME (or a --store URL)")
    try:
        validate_namespace(bucket)  # S3's bucket naming rules, which the S3 SDK checks
    except InvalidNamespace:
        raise ConfigError(f"bucket {bucket!r} is no valid S3 bucket name: 3-63 lowercase "
                          "letters, digits, dots and hyphens, starting and ending with a letter "
                          "or digit") from None
    for e in endpoints:
        split_endpoint(e)  # validates
    if args.expire_days < 0 or args.abort_days < 1:
        raise ConfigError("--expire-days must be >= 0 and --abort-days >= 1")
    if args.timeout <= 0 or args.max_skew <= 0:
        raise ConfigError("--timeout and --max-skew must be positive")
    access, secret, token, source = resolve_credentials(env, args.profile)
    region = args.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    return Target(endpoints=endpoints, bucket=bucket, prefix=prefix, region=region,
                  access_key=access, secret_key=secret, session_token=token,
                  credentials_from=source, timeout=args.timeout, max_skew=args.max_skew,
                  verify_tls=not args.insecure)


def run(args: argparse.Namespace) -> int:
    target = target_from_args(args)
    pre: list[Check] = []
    if args.setup:
        pre = setup(target, expire_days=args.expire_days, abort_days=args.abort_days)
    if any(c.status == FAIL for c in pre):
        report = Report(target, pre)
    else:
        report = run_checks(target)
        report.checks[:0] = pre
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(report.to_text())
    return 0 if report.ok else 1
