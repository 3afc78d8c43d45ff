"""Operations against a running gateway: /metrics, checksum failures seen through HTTP,
virtual-hosted-style addressing under --domain, and JSON logs carrying a request id."""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import make_s3_client
from tests.gateway.badinput import send, signed, signed_headers
from tests.gateway.conftest import DOMAIN, Gateway, gateway_client


def scrape(gateway: Gateway) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by name: [(labels, value), ...]."""
    with urllib.request.urlopen(gateway.endpoint + "/metrics", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str,
          **labels: str) -> float:
    return sum(v for lab, v in samples.get(name, [])
               if all(lab.get(k) == want for k, want in labels.items()))


def test_metrics(gateway: Gateway, gw_s3: Any, gw_bucket: str) -> None:
    data = os.urandom(200_000)
    gw_s3.put_object(Bucket=gw_bucket, Key="m/1", Body=data)
    with pytest.raises(gw_s3.exceptions.NoSuchKey):
        gw_s3.get_object(Bucket=gw_bucket, Key="m/absent")
    r = send("POST", gateway.endpoint + "/v1/flush",
             headers={"Authorization": "Bearer " + "s3kvgatewaytest:gw/secret+key0123456789"})
    assert r.status == 200
    before = scrape(gateway)
    # both from the DRAM tier, which took the block as it was written (tests/store/test_dram.py
    # has the read-filled tier's misses)
    assert gw_s3.get_object(Bucket=gw_bucket, Key="m/1")["Body"].read() == data
    assert gw_s3.get_object(Bucket=gw_bucket, Key="m/1")["Body"].read() == data
    m = scrape(gateway)

    assert value(m, "s3kv_requests_total", op="PutObject", status="200") >= 1
    assert value(m, "s3kv_requests_total", op="GetObject", status="404") >= 1
    assert value(m, "s3kv_requests_total", op="GetObject", status="200") >= 2
    assert value(m, "s3kv_requests_total", op="NativeFlush", status="200") >= 1
    assert value(m, "s3kv_requests_total", op="CreateBucket", status="200") >= 1
    assert value(m, "s3kv_request_duration_seconds_count", op="GetObject") >= 3
    buckets = [lab["le"] for lab, _ in m["s3kv_request_duration_seconds_bucket"]
               if lab["op"] == "PutObject"]
    assert "0.001" in buckets and "+Inf" in buckets
    assert value(m, "s3kv_http_bytes_in_total") >= len(data)
    assert value(m, "s3kv_http_bytes_out_total") - value(before, "s3kv_http_bytes_out_total") \
        >= 2 * len(data)
    assert value(m, "s3kv_index_entries") >= 1
    assert value(m, "s3kv_index_bytes") > 0
    assert value(m, "s3kv_sealed_segments") >= 1
    assert "s3kv_open_segments" in m and "s3kv_open_segment_bytes" in m
    assert "s3kv_dram_misses_total" in m
    assert value(m, "s3kv_dram_hits_total") - value(before, "s3kv_dram_hits_total") >= 2
    assert value(m, "s3kv_write_amplification") >= 1.0
    assert value(m, "s3kv_backend_healthy") == 1.0
    for name in ("s3kv_checksum_failures_total", "s3kv_evictions_total",
                 "s3kv_backend_errors_total", "s3kv_blocks_put_total",
                 "s3kv_segments_sealed_total", "s3kv_backpressure_rejections_total",
                 "s3kv_block_hits_total", "s3kv_block_misses_total", "s3kv_dram_bytes",
                 "s3kv_sealed_bytes", "s3kv_backend_bytes_written_total"):
        assert name in m, name


def _backend_client_and_prefix(gateway: Gateway) -> tuple[Any, str, str]:
    parts = urlsplit(gateway.store)
    endpoint = parse_qs(parts.query)["endpoint"][0]
    return make_s3_client(endpoint), parts.netloc, parts.path.lstrip("/") + "/"


def test_corrupt_segment_is_a_miss_not_data(multipart_gateway: Gateway) -> None:
    """A checksum mismatch on read is a 404 miss, counted and logged with the request id.
    (On the gateway without a DRAM tier: the default one would serve the block from memory,
    as it was written.)"""
    gateway = multipart_gateway
    gw_s3 = gateway_client(gateway.endpoint)
    gw_bucket = f"c-{uuid.uuid4().hex[:12]}"
    gw_s3.create_bucket(Bucket=gw_bucket)
    data = b"\xab" * 150_000
    gw_s3.put_object(Bucket=gw_bucket, Key="c/victim", Body=data)
    r = send("POST", gateway.endpoint + "/v1/flush",
             headers={"Authorization": "Bearer " + "s3kvgatewaytest:gw/secret+key0123456789"})
    assert r.status == 200
    backend, bucket, prefix = _backend_client_and_prefix(gateway)
    segs = [o["Key"] for o in backend.list_objects_v2(
        Bucket=bucket, Prefix=prefix + "segments/")["Contents"]]
    corrupted = 0
    for key in segs:  # flip the victim's bytes wherever they are (only its segment has them)
        body = backend.get_object(Bucket=bucket, Key=key)["Body"].read()
        at = body.find(data[:4096])
        if at >= 0:
            flipped = bytearray(body)
            flipped[at + 100] ^= 0xFF
            backend.put_object(Bucket=bucket, Key=key, Body=bytes(flipped))
            corrupted += 1
    assert corrupted == 1
    before = value(scrape(gateway), "s3kv_checksum_failures_total")
    r = signed("GET", f"{gateway.endpoint}/{gw_bucket}/c/victim")
    assert (r.status, r.code) == (404, "NoSuchKey")
    assert b"\xab" * 64 not in r.body
    after = value(scrape(gateway), "s3kv_checksum_failures_total")
    assert after == before + 1
    rid = r.headers["x-amz-request-id"]
    lines = _log_lines(gateway, rid)
    # the store's own report of the mismatch (its event name is the store's business) is a line
    # of this request: it carries the request id
    assert [ln for ln in lines if ln["event"] != "http.request" and ln["level"] == "error"]


def _log_lines(gateway: Gateway, request_id: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 5
    while True:
        found = []
        for raw in gateway.log_text().splitlines():
            if not raw.startswith("{"):
                continue
            line = json.loads(raw)
            if line.get("request_id") == request_id:
                found.append(line)
        if any(ln["event"] == "http.request" for ln in found) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_json_logs_carry_request_id(gateway: Gateway, gw_s3: Any, gw_bucket: str) -> None:
    resp = gw_s3.put_object(Bucket=gw_bucket, Key="log/1", Body=b"x")
    rid = resp["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
    assert rid
    lines = _log_lines(gateway, rid)
    assert lines, "no log line carries the request id"
    req = [ln for ln in lines if ln["event"] == "http.request"]
    assert len(req) == 1
    assert req[0]["op"] == "PutObject" and req[0]["status"] == 200
    assert req[0]["path"] == f"/{gw_bucket}/log/1"
    assert "timestamp" in req[0] and "level" in req[0]
    # errors too, and on the native API
    r = signed("GET", f"{gateway.endpoint}/{gw_bucket}/log/absent")
    assert r.status == 404
    err = _log_lines(gateway, r.headers["x-amz-request-id"])
    assert [ln["status"] for ln in err if ln["event"] == "http.request"] == [404]
    # every JSON line of the process is one JSON object (no stray text but the banner)
    for raw in gateway.log_text().splitlines():
        if raw.startswith("{"):
            json.loads(raw)
        else:
            assert raw.startswith("s3kv gateway listening"), raw


# ---- virtual-hosted style ------------------------------------------------------------------
def _vhost(gateway: Gateway, bucket: str) -> str:
    return f"{bucket}.{DOMAIN}:{gateway.port}"


def vsigned(gateway: Gateway, bucket: str, method: str, path: str, *, body: bytes = b"",
            headers: dict[str, str] | None = None) -> Any:
    """A SigV4 request to 127.0.0.1 with ``Host: BUCKET.DOMAIN:PORT`` (signed with that host)."""
    url = f"{gateway.endpoint}{path}"
    hdrs = signed_headers(method, url, body=body, headers=headers,
                          host=_vhost(gateway, bucket))
    return send(method, url, body=body, headers=hdrs)


def test_virtual_hosted_style(gateway: Gateway, gw_s3: Any, gw_bucket: str) -> None:
    data = os.urandom(70_000)
    r = vsigned(gateway, gw_bucket, "PUT", "/vh/key1", body=data)
    assert r.status == 200, r.body[:300]
    r = vsigned(gateway, gw_bucket, "GET", "/vh/key1")
    assert (r.status, r.body) == (200, data)
    r = vsigned(gateway, gw_bucket, "GET", "/vh/key1", headers={"Range": "bytes=10-19"})
    assert (r.status, r.body) == (206, data[10:20])
    r = vsigned(gateway, gw_bucket, "HEAD", "/")
    assert r.status == 200
    r = vsigned(gateway, gw_bucket, "GET", "/?list-type=2&prefix=vh%2F")
    assert r.status == 200 and b"<Key>vh/key1</Key>" in r.body
    # the same object path-style
    assert gw_s3.get_object(Bucket=gw_bucket, Key="vh/key1")["Body"].read() == data
    r = vsigned(gateway, gw_bucket, "DELETE", "/vh/key1")
    assert r.status == 204
    r = vsigned(gateway, "no-such-bucket", "GET", "/k")
    assert (r.status, r.code) == (404, "NoSuchBucket")
    # a virtual host signed for another bucket does not verify
    url = f"{gateway.endpoint}/vh/key1"
    hdrs = signed_headers("GET", url, host=_vhost(gateway, gw_bucket))
    hdrs["Host"] = _vhost(gateway, "other-bucket")
    r = send("GET", url, headers=hdrs)
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch")
    # virtual-hosted bucket creation and a boto3 client that addresses buckets that way
    name = f"vh-{os.urandom(4).hex()}"
    r = vsigned(gateway, name, "PUT", "/")
    assert r.status == 200, r.body[:300]
    assert name in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]
    s3v = gateway_client(gateway.endpoint, s3={"addressing_style": "virtual"})
    # boto3 cannot resolve BUCKET.s3.localtest here; path-style endpoints still reach it
    assert s3v.meta.config.s3["addressing_style"] == "virtual"


def test_client_gone_mid_response_is_not_an_error(gateway: Gateway, gw_bucket: str) -> None:
    """A client that disconnects before the batch-get answer is written is counted as 499 and
    logged as http.client_gone, never as an unhandled 500."""
    import socket

    from s3kv.frames import encode_frames

    token = "s3kvgatewaytest:gw/secret+key0123456789"
    body = b"".join(encode_frames([(f"gone/{i}", os.urandom(300_000)) for i in range(8)]))
    r = send("POST", f"{gateway.endpoint}/v1/{gw_bucket}/batch-put", body=body,
             headers={"Authorization": "Bearer " + token})
    assert r.status == 200
    keys = json.dumps({"keys": [f"gone/{i}" for i in range(8)] * 32}).encode()
    host, port = urlsplit(gateway.endpoint).netloc.split(":")
    for _ in range(5):
        with socket.create_connection((host, int(port))) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.sendall(f"POST /v1/{gw_bucket}/batch-get HTTP/1.1\r\nHost: {host}\r\n"
                      f"Authorization: Bearer {token}\r\nContent-Length: {len(keys)}\r\n\r\n"
                      .encode() + keys)
        # closed at once with RST, before the 75 MiB answer could be written
    time.sleep(0.5)
    m = scrape(gateway)
    assert value(m, "s3kv_requests_total", op="NativeBatchGet", status="500") == 0
    with open(gateway.log_path) as fh:
        assert "http.unhandled" not in fh.read()
