"""The S3 fuzzer (test_fuzz_stateful.py's model and rules) with the gateway restarted between
steps: gracefully (SIGTERM: it seals what it holds), or killed (SIGKILL) right after a flush.
After each restart every bucket and object of the model reads back as it was: its bytes, its
ETag, its listing, and no deleted object or bucket comes back (the gateway's eviction deletes
the segments that deletes and overwrites left dead meanwhile; tests/store/test_store_model.py
drives that harder, on a few keys). Multipart uploads in flight are the gateway's memory: one
begun before a restart is gone after it (NoSuchUpload). The real gateway process on the real
moto server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import consumes, rule, run_state_machine_as_test

from tests.reliability.conftest import Report
from tests.reliability.test_fuzz_stateful import GatewayMachine
from tests.support.gateway import SMALL, Gateway, backend_store, running_gateway
from tests.support.s3server import MotoServer


@pytest.fixture(scope="module")
def gw(s3_server: MotoServer) -> Iterator[Gateway]:
    with running_gateway(backend_store(s3_server, f"restarts-{uuid.uuid4().hex[:6]}"),
                         [*SMALL, "--sync-interval", "0"]) as g:
        yield g


class RestartingMachine(GatewayMachine):
    restarted: list[int]  # restarts over every sequence (the test checks there were some)

    def __init__(self) -> None:
        super().__init__()
        self.restarts = 0
        self.begun: dict[str, int] = {}  # upload id -> the restart count it was begun at
        self.etags: dict[tuple[str, str], str] = {}

    @rule(target=GatewayMachine.uploads, i=st.integers(0, 2), key=st.sampled_from("ab"))
    def create_upload(self, i: int, key: str) -> tuple[str, str, str]:
        up = super().create_upload(i, key)
        self.begun[up[2]] = self.restarts
        return up

    @rule(up=consumes(GatewayMachine.uploads), big_first=st.booleans(),
          tail=st.binary(max_size=64), abort=st.booleans())
    def finish_upload(self, up: tuple[str, str, str], big_first: bool, tail: bytes,
                      abort: bool) -> None:
        name, key, uid = up
        if uid != "none" and self.begun[uid] != self.restarts:
            code, _ = self._err(self.s3.upload_part, Bucket=name, Key=key, UploadId=uid,
                                PartNumber=1, Body=tail)
            assert code in ("NoSuchUpload", "NoSuchBucket"), code
            return
        super().finish_upload(up, big_first, tail, abort)

    @rule(graceful=st.booleans())
    def restart(self, graceful: bool) -> None:
        self.etags = {(b, k): self._etag(b, k) for b, objs in self.model.items() for k in objs}
        if graceful:
            assert self.g.terminate() == 0
        else:
            self.flush()  # what a flush made durable survives a kill
            self.g.kill()
        self.g.start()
        self.restarts += 1
        self.restarted[0] += 1
        self.counter[0] += 2
        self._all_as_modelled()

    def _etag(self, bucket: str, key: str) -> str:
        return str(self.s3.head_object(Bucket=bucket, Key=key)["ETag"])

    def _all_as_modelled(self) -> None:
        listed = {b["Name"] for b in self.s3.list_buckets()["Buckets"]}
        assert {n for n in self.names if n in listed} == set(self.model)
        for bucket in self.names:
            objs = self.model.get(bucket)
            if objs is None:
                code, _ = self._err(self.s3.head_bucket, Bucket=bucket)
                assert code in ("404", "NoSuchBucket"), f"deleted bucket {bucket} is back"
                continue
            keys = {o["Key"] for o in self.s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
            assert keys == set(objs), f"{bucket}: listed {sorted(keys)}, want {sorted(objs)}"
            for key, data in objs.items():
                assert self._read(bucket, key) == data, f"{bucket}/{key} reads back wrong"
                assert self._etag(bucket, key) == self.etags[bucket, key]

    def _read(self, bucket: str, key: str) -> bytes | None:
        try:
            body: Any = self.s3.get_object(Bucket=bucket, Key=key)["Body"]
        except ClientError:
            return None
        return bytes(body.read())


def test_operations_across_restarts(gw: Gateway, long_run: bool,
                                    reliability_report: Report) -> None:
    counter = [0]
    RestartingMachine.g = gw
    RestartingMachine.counter = counter
    RestartingMachine.restarted = restarted = [0]
    run_state_machine_as_test(RestartingMachine, settings=settings(
        max_examples=60 if long_run else 12, stateful_step_count=40 if long_run else 25,
        deadline=None, derandomize=not long_run, database=None,
        suppress_health_check=list(HealthCheck)))
    assert restarted[0] >= 5, f"only {restarted[0]} restarts: the sequences did not test them"
    reliability_report.record(
        "fuzz", "the same with the gateway restarted (SIGTERM, or SIGKILL after a flush) "
        "between steps: every object, ETag, listing and deleted bucket as modelled",
        faults=0, requests=counter[0], peak_rss_mib=gw.rss_bytes() / 2**20)
