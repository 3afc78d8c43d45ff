"""Fuzzing the gateway (hypothesis): random operation sequences through boto3, checked after
every step against an in-memory model (put/get/range/head/delete/delete-objects/list/multipart/
flush/create and delete bucket), and a body the fuzzer found stored wrong. The real gateway
process runs on the real moto server. CI runs a few sequences (derandomized: the same ones
every run); ``--long`` runs hundreds.
"""

from __future__ import annotations

import hashlib
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from tests.reliability.conftest import Report
from tests.support.gateway import (
    GW_ACCESS,
    GW_SECRET,
    MAX_BLOCK,
    SMALL,
    TOKEN,
    Gateway,
    backend_store,
    running_gateway,
)
from tests.support.rawhttp import UNSIGNED, Response, send, sign, signed_send
from tests.support.s3server import REGION, MotoServer

ENC_BUCKET = f"enc-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def gw(s3_server: MotoServer) -> Iterator[Gateway]:
    with running_gateway(backend_store(s3_server), [*SMALL, "--dram-cache", "16MiB"]) as g:
        yield g


_SKEY = st.text(st.sampled_from("ab/é1"), min_size=1, max_size=6).filter(
    lambda k: all(p not in (".", "..") for p in k.split("/")))
_DATA = st.one_of(st.binary(max_size=64), st.integers(0, 300_000).map(
    lambda n: (hashlib.sha256(str(n).encode()).digest() * (n // 32 + 1))[:n]))
MIN_PART = 5 * 1024 * 1024


class GatewayMachine(RuleBasedStateMachine):
    """Buckets and objects through boto3; after every step the model and gateway agree."""

    g: Gateway
    counter: list[int]

    uploads = Bundle("uploads")

    def __init__(self) -> None:
        super().__init__()
        run = uuid.uuid4().hex[:8]
        self.names = [f"sm-{run}-{i}" for i in range(3)]
        self.model: dict[str, dict[str, bytes]] = {}
        s3 = boto3.client(
            "s3", endpoint_url=self.g.endpoint, region_name=REGION,
            aws_access_key_id=GW_ACCESS, aws_secret_access_key=GW_SECRET,
            config=Config(signature_version="s3v4", retries={"max_attempts": 1},
                          s3={"addressing_style": "path"}))

        def count(**_: Any) -> None:
            self.counter[0] += 1

        s3.meta.events.register("before-send", count)
        self.s3 = s3

    def _err(self, fn: Any, **kw: Any) -> tuple[str, int]:
        try:
            fn(**kw)
        except ClientError as exc:
            return (exc.response["Error"]["Code"],
                    exc.response["ResponseMetadata"]["HTTPStatusCode"])
        return ("", 200)

    @initialize()
    def first_bucket(self) -> None:
        self.s3.create_bucket(Bucket=self.names[0])
        self.model[self.names[0]] = {}

    @rule(i=st.integers(0, 2))
    def create_bucket(self, i: int) -> None:
        name = self.names[i]
        code, _ = self._err(self.s3.create_bucket, Bucket=name)
        if name in self.model:
            assert code == "BucketAlreadyOwnedByYou"
        else:
            assert code == ""
            self.model[name] = {}

    @rule(i=st.integers(0, 2))
    def delete_bucket(self, i: int) -> None:
        name = self.names[i]
        code, _ = self._err(self.s3.delete_bucket, Bucket=name)
        if name not in self.model:
            assert code == "NoSuchBucket"
        elif self.model[name]:
            assert code == "BucketNotEmpty"
        else:
            assert code == "", code
            del self.model[name]

    @rule(i=st.integers(0, 2), key=_SKEY, data=_DATA)
    def put(self, i: int, key: str, data: bytes) -> None:
        name = self.names[i]
        code, _ = self._err(self.s3.put_object, Bucket=name, Key=key, Body=data)
        if name not in self.model:
            assert code == "NoSuchBucket"
        else:
            assert code == "", code
            self.model[name][key] = data

    @rule(i=st.integers(0, 2), key=_SKEY)
    def get(self, i: int, key: str) -> None:
        name = self.names[i]
        try:
            body = self.s3.get_object(Bucket=name, Key=key)["Body"].read()
        except ClientError as exc:
            expected = "NoSuchBucket" if name not in self.model else "NoSuchKey"
            assert exc.response["Error"]["Code"] == expected
            assert name not in self.model or key not in self.model[name]
            return
        assert body == self.model[name][key]

    @rule(i=st.integers(0, 2), key=_SKEY, start=st.integers(0, 400_000),
          length=st.one_of(st.none(), st.integers(0, 400_000)), suffix=st.booleans())
    def ranged_get(self, i: int, key: str, start: int, length: int | None,
                   suffix: bool) -> None:
        name = self.names[i]
        data = self.model.get(name, {}).get(key)
        if suffix:
            rng = f"bytes=-{start}"
        else:
            rng = f"bytes={start}-" + ("" if length is None else str(start + length))
        try:
            resp = self.s3.get_object(Bucket=name, Key=key, Range=rng)
            body = resp["Body"].read()
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if data is None:
                assert code in ("NoSuchKey", "NoSuchBucket")
            elif suffix:
                assert start == 0 and code == "InvalidRange", code
            else:
                assert start >= len(data) and code == "InvalidRange", (code, start, len(data))
            return
        assert data is not None
        if suffix:
            expected = data[max(0, len(data) - start):]
        else:
            end = len(data) if length is None else min(start + length + 1, len(data))
            expected = data[start:end]
        assert body == expected

    @rule(i=st.integers(0, 2), key=_SKEY, j=st.integers(0, 2), dest=_SKEY)
    def copy(self, i: int, key: str, j: int, dest: str) -> None:
        src, dst = self.names[i], self.names[j]
        same = (src, key) == (dst, dest)
        code, _ = self._err(self.s3.copy_object, Bucket=dst, Key=dest,
                            CopySource={"Bucket": src, "Key": key},
                            MetadataDirective="REPLACE" if same else "COPY")
        if dst not in self.model or src not in self.model:
            assert code == "NoSuchBucket", code
        elif key not in self.model[src]:
            assert code == "NoSuchKey", code
        else:
            assert code == "", code
            self.model[dst][dest] = self.model[src][key]

    @rule(i=st.integers(0, 2), key=_SKEY)
    def head(self, i: int, key: str) -> None:
        name = self.names[i]
        try:
            size = self.s3.head_object(Bucket=name, Key=key)["ContentLength"]
        except ClientError as exc:
            assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404
            assert name not in self.model or key not in self.model[name]
            return
        assert size == len(self.model[name][key])

    @rule(i=st.integers(0, 2), key=_SKEY)
    def delete(self, i: int, key: str) -> None:
        name = self.names[i]
        code, _ = self._err(self.s3.delete_object, Bucket=name, Key=key)
        if name not in self.model:
            assert code == "NoSuchBucket"
        else:
            assert code == ""
            self.model[name].pop(key, None)

    @rule(i=st.integers(0, 2), keys=st.lists(_SKEY, min_size=1, max_size=6), quiet=st.booleans(),
          versions=st.lists(st.sampled_from([None, "null", "3HL4kqtJlcpXroDTDm"]), min_size=6,
                            max_size=6))
    def delete_objects(self, i: int, keys: list[str], quiet: bool,
                       versions: list[str | None]) -> None:
        """Entries naming the one version (``null``) or none delete; another version is that
        key's error and leaves the object."""
        name = self.names[i]
        objects = [{"Key": k} if v is None else {"Key": k, "VersionId": v}
                   for k, v in zip(keys, versions, strict=False)]
        try:
            resp = self.s3.delete_objects(Bucket=name, Delete={"Objects": objects,
                                                               "Quiet": quiet})
        except ClientError as exc:
            assert name not in self.model and exc.response["Error"]["Code"] == "NoSuchBucket"
            return
        refused = [o for o in objects if o.get("VersionId") not in (None, "null")]
        assert sorted((e["Key"], e["Code"]) for e in resp.get("Errors", [])) == \
            sorted((o["Key"], "NotImplemented") for o in refused)
        done = [o for o in objects if o not in refused]
        if not quiet:
            assert sorted(d["Key"] for d in resp.get("Deleted", [])) == \
                sorted(o["Key"] for o in done)
        for o in done:
            self.model[name].pop(o["Key"], None)

    @rule(i=st.integers(0, 2), prefix=st.text(st.sampled_from("ab/é"), max_size=3),
          delimiter=st.sampled_from([None, "/", "b"]), page=st.integers(1, 5),
          versions=st.booleans())
    def list_objects(self, i: int, prefix: str, delimiter: str | None, page: int,
                     versions: bool) -> None:
        """ListObjectsV2, or ListObjectVersions (each object as its one version), page by page."""
        name = self.names[i]
        kw: dict[str, Any] = {"Bucket": name, "Prefix": prefix, "MaxKeys": page}
        if delimiter:
            kw["Delimiter"] = delimiter
        keys: list[tuple[str, int]] = []
        prefixes: list[str] = []
        try:
            while True:
                if versions:
                    resp = self.s3.list_object_versions(**kw)
                    assert {v["VersionId"] for v in resp.get("Versions", [])} <= {"null"}
                    assert "DeleteMarkers" not in resp
                    keys += [(v["Key"], v["Size"]) for v in resp.get("Versions", [])]
                else:
                    resp = self.s3.list_objects_v2(**kw)
                    keys += [(c["Key"], c["Size"]) for c in resp.get("Contents", [])]
                prefixes += [p["Prefix"] for p in resp.get("CommonPrefixes", [])]
                if not resp["IsTruncated"]:
                    break
                if versions:
                    kw["KeyMarker"] = resp["NextKeyMarker"]
                    kw["VersionIdMarker"] = resp["NextVersionIdMarker"]
                else:
                    kw["ContinuationToken"] = resp["NextContinuationToken"]
        except ClientError as exc:
            assert name not in self.model and exc.response["Error"]["Code"] == "NoSuchBucket"
            return
        want_keys, want_prefixes = [], set()
        for k in sorted(self.model[name], key=lambda s: s.encode()):
            if not k.startswith(prefix):
                continue
            rest = k[len(prefix):]
            if delimiter and delimiter in rest:
                want_prefixes.add(prefix + rest[:rest.index(delimiter) + len(delimiter)])
            else:
                want_keys.append((k, len(self.model[name][k])))
        assert keys == want_keys
        assert len(prefixes) == len(set(prefixes))
        assert set(prefixes) == want_prefixes

    @rule(target=uploads, i=st.integers(0, 2), key=_SKEY)
    def create_upload(self, i: int, key: str) -> tuple[str, str, str]:
        name = self.names[i]
        try:
            uid = self.s3.create_multipart_upload(Bucket=name, Key=key)["UploadId"]
        except ClientError as exc:
            assert name not in self.model and exc.response["Error"]["Code"] == "NoSuchBucket"
            return name, key, "none"
        return name, key, uid

    @rule(up=consumes(uploads), big_first=st.booleans(), tail=_DATA, abort=st.booleans())
    def finish_upload(self, up: tuple[str, str, str], big_first: bool, tail: bytes,
                      abort: bool) -> None:
        name, key, uid = up
        if uid == "none":
            return
        if abort:
            code, _ = self._err(self.s3.abort_multipart_upload, Bucket=name, Key=key,
                                UploadId=uid)
            assert code in ("", "NoSuchUpload")
            return
        parts_data = ([b"P" * MIN_PART] if big_first else []) + [tail]
        parts = []
        if sum(len(d) for d in parts_data) > MAX_BLOCK:  # past --max-block-size
            self.s3.upload_part(Bucket=name, Key=key, UploadId=uid, PartNumber=1,
                                Body=parts_data[0])
            code, _ = self._err(self.s3.upload_part, Bucket=name, Key=key, UploadId=uid,
                                PartNumber=2, Body=tail)
            assert code == "EntityTooLarge", code
            self.s3.abort_multipart_upload(Bucket=name, Key=key, UploadId=uid)
            return
        try:
            for n, d in enumerate(parts_data, 1):
                etag = self.s3.upload_part(Bucket=name, Key=key, UploadId=uid, PartNumber=n,
                                           Body=d)["ETag"]
                parts.append({"PartNumber": n, "ETag": etag})
            self.s3.complete_multipart_upload(Bucket=name, Key=key, UploadId=uid,
                                              MultipartUpload={"Parts": parts})
        except ClientError as exc:
            # the bucket was deleted (with its namespace) since the upload started
            assert name not in self.model, exc.response
            return
        assert name in self.model
        self.model[name][key] = b"".join(parts_data)

    @rule()
    def flush(self) -> None:
        req = urllib.request.Request(self.g.endpoint + "/v1/flush", method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
        self.counter[0] += 1
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200

    @invariant()
    def buckets_listed(self) -> None:
        names = {b["Name"] for b in self.s3.list_buckets()["Buckets"]}
        assert {n for n in self.names if n in names} == set(self.model)

    def teardown(self) -> None:
        for name, objs in self.model.items():
            for k in objs:
                self.s3.delete_object(Bucket=name, Key=k)
            self.s3.delete_bucket(Bucket=name)


def test_stateful_operations(gw: Gateway, long_run: bool, reliability_report: Report) -> None:
    counter = [0]
    GatewayMachine.g = gw
    GatewayMachine.counter = counter
    run_state_machine_as_test(GatewayMachine, settings=settings(
        max_examples=200 if long_run else 25, stateful_step_count=50 if long_run else 25,
        deadline=None, derandomize=not long_run, database=None,
        suppress_health_check=list(HealthCheck)))
    reliability_report.record(
        "fuzz", "random operation sequences (boto3) vs an in-memory model: put/get/range/head/"
        "delete/delete-objects/list/multipart/flush/create+delete bucket",
        faults=0, requests=counter[0], peak_rss_mib=gw.rss_bytes() / 2**20)


def _host(g: Gateway) -> str:
    return f"127.0.0.1:{g.port}"


def _signed(g: Gateway, method: str, target: str, body: bytes = b"",
            headers: dict[str, str] | None = None) -> Response:
    return signed_send(g.port, method, target, GW_ACCESS, GW_SECRET, body, headers)


def test_content_encoding_bodies_stored_as_sent(gw: Gateway, reliability_report: Report) -> None:
    """Found by the fuzzer: aiohttp decompressed Content-Encoding: gzip/deflate request bodies
    itself, so a valid gzip upload failed its signed hash (or, unsigned, stored other bytes
    than were sent) and an invalid one was a 500. S3 stores the bytes as sent."""
    import gzip
    import zlib

    assert _signed(gw, "PUT", f"/{ENC_BUCKET}").status in (200, 409)
    n = 1
    for enc, body in [("gzip", gzip.compress(b"kv" * 5000)), ("deflate", zlib.compress(b"x")),
                      ("br", b"not brotli"), ("gzip", b"not gzip at all")]:
        for payload in (None, UNSIGNED):
            target = f"/{ENC_BUCKET}/enc-{enc}-{payload is None}"
            hs = sign("PUT", target, _host(gw), GW_ACCESS, GW_SECRET, body=body,
                      headers={"Content-Encoding": enc}, payload=payload)
            r = send(gw.port, "PUT", target, hs, body)
            assert r.status == 200, (enc, payload, r)
            assert _signed(gw, "GET", target).body == body
            n += 2
    reliability_report.record("fuzz", "Content-Encoding gzip/deflate/br bodies stored as sent",
                              faults=4, requests=n)
