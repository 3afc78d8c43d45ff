"""The front's request metrics, kept in plain numbers and rendered at scrape time, read back
with Prometheus's own text parser: counters per (op, status), cumulative histogram buckets
whose bound is inclusive (``le``), sum and count, byte counters."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from s3kv.gateway.metrics import GatewayMetrics


def samples(m: GatewayMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(m.render().decode())
            for s in fam.samples}


def test_requests_latency_and_bytes_as_prometheus_reads_them() -> None:
    m = GatewayMetrics(lambda: {})
    for seconds in (0.0004, 0.001, 0.001, 0.3, 30.0):
        m.observe("PutObject", 200, seconds)
    m.observe("PutObject", 503, 0.002)
    m.observe("GetObject", 404, 0.0001)
    m.bytes_in.inc(4096)
    m.bytes_out.inc(10)
    m.bytes_out.inc(5)
    got = samples(m)

    def put(le: str) -> float:
        return got[("s3kv_request_duration_seconds_bucket",
                    frozenset({("op", "PutObject"), ("le", le)}))]

    assert got[("s3kv_requests_total", frozenset({("op", "PutObject"), ("status", "200")}))] == 5
    assert got[("s3kv_requests_total", frozenset({("op", "PutObject"), ("status", "503")}))] == 1
    assert got[("s3kv_requests_total", frozenset({("op", "GetObject"), ("status", "404")}))] == 1
    assert put("0.0005") == 1 and put("0.001") == 3  # 1 ms falls in its own bucket
    assert put("0.0025") == 4 and put("0.25") == 4 and put("0.5") == 5
    assert put("10.0") == 5 and put("+Inf") == 6
    count = got[("s3kv_request_duration_seconds_count", frozenset({("op", "PutObject")}))]
    total = got[("s3kv_request_duration_seconds_sum", frozenset({("op", "PutObject")}))]
    assert count == 6 and abs(total - 30.3044) < 1e-9
    assert got[("s3kv_http_bytes_in_total", frozenset())] == 4096
    assert got[("s3kv_http_bytes_out_total", frozenset())] == 15
