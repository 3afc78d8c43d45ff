"""Each benchmark type runs against the real S3 server, records every op, and cleans up."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from tests.warp.conftest import run, small_config
from warp.benchmarks import load
from warp.benchmarks.base import Context
from warp.config import MixedRatio
from warp.payload import PayloadSource, variant_of
from warp.records import HEADER, WARP_COLUMNS, read_records
from warp.runner import prepare_object_set

EXPECTED_OPS = {
    "put": {"PUT"}, "get": {"GET"}, "stat": {"STAT"}, "delete": {"DELETE"}, "list": {"LIST"},
    "mixed": {"GET", "STAT", "PUT", "DELETE"},
}


def _keys(s3_client: Any, bucket: str) -> list[str]:
    pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


@pytest.mark.parametrize("op", ["put", "get", "stat", "delete", "list", "mixed"])
def test_benchmark_type_runs_and_records(op: str, s3_server: Any, s3_client: Any, bucket: str,
                                         tmp_path: Path) -> None:
    cfg = small_config(s3_server.endpoint, bucket, op, duration=1.5 if op == "mixed" else 1.0,
                       objects=40 if op == "mixed" else 12)
    result = run(cfg, tmp_path / "r.csv.zst")
    records = read_records(tmp_path / "r.csv.zst")
    assert records, "no operation was recorded"
    assert result.stats.ops == len(records)
    assert {r.op for r in records} <= EXPECTED_OPS[op]
    if op == "mixed":
        assert {r.op for r in records} >= {"GET", "STAT"}
    assert [r.error for r in records if r.error] == []
    assert {r.client_id for r in records} == {"c1"}
    assert {r.thread for r in records} <= {0, 1}
    assert all(r.endpoint == s3_server.endpoint.rstrip("/") for r in records)
    assert all(r.end_ns >= r.start_ns for r in records)
    assert all(r.http_status in (200, 204, 206) for r in records)
    for r in records:
        if r.op in ("PUT", "GET"):
            assert r.size == cfg.obj_size
        if r.op == "GET":
            assert r.start_ns < r.first_byte_ns <= r.end_ns
    if op == "delete":
        assert sum(r.n_objects for r in records) == cfg.objects
    if op == "list":
        assert all(r.n_objects == cfg.objects for r in records)
    assert _keys(s3_client, bucket) == [], "the benchmark's objects were not removed"


def test_multipart_put_writes_the_payload_and_noclear_keeps_it(
        s3_server: Any, s3_client: Any, bucket: str, tmp_path: Path) -> None:
    size = 11 * 1024 * 1024  # 3 parts of 5 MiB (last 1 MiB)
    cfg = small_config(s3_server.endpoint, bucket, "put", obj_size=size, concurrent=1,
                       duration=2.5, noclear=True)
    run(cfg, tmp_path / "r.csv.zst")
    records = read_records(tmp_path / "r.csv.zst")
    assert records and all(r.ok and r.size == size for r in records)
    key = records[0].file
    head = s3_client.head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == size
    assert head["ETag"].strip('"').endswith("-3"), "not a 3-part multipart upload"
    body = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    expected = b"".join(bytes(v) for v in PayloadSource(cfg.seed).slices(variant_of(key), 0,
                                                                        size))
    assert body == expected
    # kept (--noclear); an upload cancelled at the deadline may have completed unrecorded
    assert {r.file for r in records} <= set(_keys(s3_client, bucket))


def test_ranged_get_reads_ranges(s3_server: Any, bucket: str, tmp_path: Path) -> None:
    cfg = small_config(s3_server.endpoint, bucket, "get", obj_size=100_000, range_size=30_000)
    run(cfg, tmp_path / "r.csv.zst")
    records = read_records(tmp_path / "r.csv.zst")
    assert records and all(r.ok and r.http_status == 206 for r in records)
    assert {r.size for r in records} <= {30_000, 10_000}  # the last range is short


def test_get_of_overwritten_object_is_a_verification_failure(
        s3_server: Any, s3_client: Any, bucket: str, tmp_path: Path) -> None:
    cfg = small_config(s3_server.endpoint, bucket, "get", objects=4, duration=1.5)
    asyncio.run(prepare_object_set(cfg, load("get")))
    bad_key = cfg.object_key(2)
    # Same size, different bytes, written behind the generator's back.
    s3_client.put_object(Bucket=bucket, Key=bad_key, Body=b"\x00" * cfg.obj_size)
    result = run(cfg.replace(prepared=True), tmp_path / "r.csv.zst")
    records = read_records(tmp_path / "r.csv.zst")
    bad = [r for r in records if r.file == bad_key]
    good = [r for r in records if r.file != bad_key]
    assert bad and good
    assert all(r.verify_failed and "checksum" in r.error for r in bad)
    assert all(r.ok for r in good)
    assert result.stats.verify_failures == len(bad) == result.stats.errors


def test_record_file_is_warp_format(s3_server: Any, bucket: str, tmp_path: Path) -> None:
    path = tmp_path / "r.csv.zst"
    run(small_config(s3_server.endpoint, bucket, "put", duration=0.5), path)
    raw = path.read_bytes()
    assert raw[:4] == b"\x28\xb5\x2f\xfd", "not zstd"
    import zstandard

    text = zstandard.ZstdDecompressor().stream_reader(raw).read().decode()
    lines = text.splitlines()
    assert lines[0] + "\n" == HEADER
    assert lines[0].split("\t")[:len(WARP_COLUMNS)] == list(WARP_COLUMNS)
    first = dict(zip(lines[0].split("\t"), lines[1].split("\t"), strict=True))
    assert first["idx"] == "0" and first["op"] == "PUT" and first["n_objects"] == "1"
    assert first["start"].endswith("Z") and "T" in first["start"]
    assert first["first_byte"] == ""
    assert int(first["duration_ns"]) > 0
    assert lines[-1].startswith("# "), "config comment missing at the end"


def test_mixed_never_deletes_an_object_a_read_is_using(s3_server: Any, bucket: str,
                                                       tmp_path: Path) -> None:
    """Half the ops DELETE, half GET, 8 at a time on a small pool: a DELETE that picked a key
    another worker was reading made that read a 404, recorded as the server's error."""
    cfg = small_config(s3_server.endpoint, bucket, "mixed", duration=2.0, objects=16,
                       concurrent=8, obj_size=4096,
                       mixed=MixedRatio(get=40, stat=20, put=0, delete=40))
    run(cfg, tmp_path / "r.csv.zst")
    records = read_records(tmp_path / "r.csv.zst")
    ops = {op: sum(r.op == op for r in records) for op in EXPECTED_OPS["mixed"]}
    assert ops["DELETE"] > 0 and ops["GET"] > 50, ops
    assert [r.error for r in records if r.error] == []


def test_a_delete_takes_only_keys_no_read_is_using() -> None:
    ctx = Context(config=None, client=None, payload=None, recorder=None,  # type: ignore[arg-type]
                  rng=random.Random(7), pool=["a", "b", "c"])
    with ctx.reading("a"), ctx.reading("c"), ctx.reading("c"):
        assert ctx.take_for_delete() == "b"
        assert ctx.take_for_delete() is None
    assert ctx.busy == {} and sorted(ctx.pool) == ["a", "c"]
    assert ctx.take_for_delete() in ("a", "c")
