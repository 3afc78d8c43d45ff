"""The S3 backend's answers in s3kv's error hierarchy: a server out of room is BackendFull
(never retried: waiting frees nothing; the store evicts, store/fullness.py), apart from the
transient and the plain refusals. The errors are botocore's own ClientError, as the server's
XML makes them."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from structlog.testing import capture_logs

from s3kv.backends import S3Backend, S3Location
from s3kv.backends.s3 import translate
from s3kv.errors import BackendError, BackendFull, BackendUnavailable, full_in
from s3kv.store.recovery import load_manifest
from tests.store.conftest import open_s3
from tests.support.s3server import MotoServer, free_port


def _answer(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "UploadPart")


@pytest.mark.parametrize(("code", "status"), [
    ("QuotaExceeded", 403),  # Ceph RGW's bucket and user quotas
    ("XMinioStorageFull", 507),  # MinIO past its free-space threshold
    ("XMinioAdminBucketQuotaExceeded", 400),  # MinIO's bucket quota
    ("InsufficientStorage", 507), ("", 507)])
def test_out_of_room_is_backend_full(code: str, status: int) -> None:
    err = translate(_answer(code, status), "UPLOAD-PART k#1")
    assert isinstance(err, BackendFull) and not err.transient and err.status == status


@pytest.mark.parametrize(("code", "status", "kind", "transient"), [
    ("SlowDown", 503, BackendUnavailable, True), ("InternalError", 500, BackendUnavailable, True),
    ("AccessDenied", 403, BackendError, False)])
def test_other_answers_are_not_full(code: str, status: int, kind: type[BackendError],
                                    transient: bool) -> None:
    err = translate(_answer(code, status), "PUT k")
    assert type(err) is kind and err.transient is transient
    assert full_in(err) is None


def test_full_in_finds_the_first_failure_behind_a_later_one() -> None:
    """A failed upload's later parts raise an error of their own from the first failure."""
    first = BackendFull("UPLOAD-PART k#1: QuotaExceeded")
    try:
        try:
            raise first
        except BackendFull as exc:
            raise BackendError("upload of k already failed") from exc
    except BackendError as later:
        assert full_in(later) is first


async def test_a_manifest_read_is_logged_by_why_it_failed(s3_server: MotoServer,
                                                          bucket: str) -> None:
    """A start or a replica sync that cannot read a segment's manifest skips the segment (a
    sync lists it again next time). A segment deleted since it was listed (another replica
    evicted it) is info; a backend that does not answer is a warning; only a manifest that
    is there and unreadable is an error. Every one was an error: the RGW soak's radosgw
    restarts logged them as such, as did its replicas' evictions."""
    up = await open_s3(s3_server.endpoint, bucket)
    down = S3Backend(S3Location(bucket, "", (f"http://127.0.0.1:{free_port()}",)),
                     timeout=2.0, connect_timeout=0.5)
    await down.open()
    try:
        events = []
        for backend in (up, down):
            with capture_logs() as logs:
                assert await load_manifest(backend, "", "n/01-00000001", 4096, True) is None
            events.append([(x["event"], x["log_level"]) for x in logs])
    finally:
        await up.close()
        await down.close()
    assert events == [[("manifest.gone", "info")], [("manifest.unavailable", "warning")]]
