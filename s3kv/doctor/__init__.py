"""Checks of a live S3/MinIO endpoint for s3kv, and its one-time set-up (`s3kv doctor`).

Every check says OK, WARN, FAIL or SKIP, what it saw, and for anything but OK how to fix it.
S3 calls go through the ``minio`` SDK (DESIGN.md: the minio SDK does administration and
health checks), with retries off and short timeouts so a dead endpoint is reported in seconds;
the single steps of a multipart upload, which the SDK does not offer publicly, are signed with
:mod:`s3kv.wire.sigv4` on the same connection pool (:mod:`s3kv.doctor.multipart`).

The package: :mod:`~s3kv.doctor.report` (statuses, checks, the report),
:mod:`~s3kv.doctor.connect` (inputs, clients, failures explained), :mod:`~s3kv.doctor.checks`
(the checks and :func:`run_checks`), :mod:`~s3kv.doctor.setup` (``--setup``).

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

from s3kv.doctor.checks import run_checks
from s3kv.doctor.connect import parse_store_url, resolve_credentials, split_endpoint
from s3kv.doctor.report import FAIL, OK, SKIP, WARN, Check, Report, Target
from s3kv.doctor.setup import setup

__all__ = ["FAIL", "OK", "SKIP", "WARN", "Check", "Report", "Target", "parse_store_url",
           "resolve_credentials", "run_checks", "setup", "split_endpoint"]
