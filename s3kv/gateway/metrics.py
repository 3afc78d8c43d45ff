"""Prometheus metrics of the gateway: request counters and latency by operation, bytes in/out,
and the store's own counters and gauges read at scrape time. Names are prefixed ``s3kv_``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# store counters (monotonic) -> metric name and help
_COUNTERS = {
    "blocks_put": ("s3kv_blocks_put_total", "Blocks accepted"),
    "bytes_accepted": ("s3kv_block_bytes_accepted_total", "Block bytes accepted from clients"),
    "backend_bytes_written": ("s3kv_backend_bytes_written_total",
                              "Bytes written to the backend (segments, sidecars)"),
    "compaction_bytes": ("s3kv_compaction_bytes_total", "Block bytes rewritten by compaction"),
    "hits": ("s3kv_block_hits_total", "Block reads that returned data"),
    "misses": ("s3kv_block_misses_total", "Block reads that missed"),
    "checksum_failures": ("s3kv_checksum_failures_total", "Blocks whose checksum did not match"),
    "backend_errors": ("s3kv_backend_errors_total", "Backend operations that failed"),
    "backend_reads": ("s3kv_backend_reads_total", "Ranged GETs issued to the backend"),
    "segments_sealed": ("s3kv_segments_sealed_total", "Segments sealed and uploaded"),
    "segments_failed": ("s3kv_segments_failed_total", "Segments whose upload failed"),
    "blocks_lost": ("s3kv_blocks_lost_total", "Write-back blocks lost with a failed segment"),
    "evictions": ("s3kv_evictions_total", "Segments evicted"),
    "evicted_bytes": ("s3kv_evicted_bytes_total", "Bytes of evicted segments"),
    "backpressure_rejections": ("s3kv_backpressure_rejections_total",
                                "Writes refused with SlowDown"),
    "dram_hits": ("s3kv_dram_hits_total", "DRAM-tier hits"),
    "dram_misses": ("s3kv_dram_misses_total", "DRAM-tier misses"),
    "uploads_paced": ("s3kv_uploads_paced_total",
                      "Part uploads held back while reads waited on the backend"),
}
_GAUGES = {
    "index_entries": ("s3kv_index_entries", "Blocks in the index"),
    "index_bytes": ("s3kv_index_bytes", "Bytes held by the index"),
    "open_segments": ("s3kv_open_segments", "Segments in memory (open or sealing)"),
    "open_segment_bytes": ("s3kv_open_segment_bytes", "Bytes of segments in memory"),
    "sealed_segments": ("s3kv_sealed_segments", "Sealed segments on the backend"),
    "sealed_bytes": ("s3kv_sealed_bytes", "Bytes of sealed segments on the backend"),
    "dram_bytes": ("s3kv_dram_bytes", "Bytes held by the DRAM tier"),
    "write_amplification": ("s3kv_write_amplification",
                            "Backend bytes written / block bytes accepted"),
    "backend_healthy": ("s3kv_backend_healthy", "1 when the backend answers"),
    "capacity_bytes": ("s3kv_capacity_bytes", "Capacity budget in bytes (0: unlimited)"),
}


class _StoreCollector(Collector):
    def __init__(self, summary: Callable[[], dict[str, float]]) -> None:
        self._summary = summary

    def collect(self) -> Iterator[Metric]:
        values = self._summary()
        for key, (name, doc) in _COUNTERS.items():
            c = CounterMetricFamily(name.removesuffix("_total"), doc)
            c.add_metric([], values.get(key, 0.0))
            yield c
        for key, (name, doc) in _GAUGES.items():
            yield GaugeMetricFamily(name, doc, value=values.get(key, 0.0))


class GatewayMetrics:
    def __init__(self, summary: Callable[[], dict[str, float]]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("s3kv_requests", "HTTP requests by operation and status",
                                ["op", "status"], registry=self.registry)
        self.latency = Histogram("s3kv_request_duration_seconds", "Request latency by operation",
                                 ["op"], buckets=_BUCKETS, registry=self.registry)
        self.bytes_in = Counter("s3kv_http_bytes_in", "Request body bytes received",
                                registry=self.registry)
        self.bytes_out = Counter("s3kv_http_bytes_out", "Response body bytes sent",
                                 registry=self.registry)
        self.registry.register(_StoreCollector(summary))
        self._counters: dict[tuple[str, int], Counter] = {}
        self._latencies: dict[str, Histogram] = {}

    def observe(self, op: str, status: int, seconds: float) -> None:
        # the labelled children, looked up once per (op, status): labels() takes a lock and
        # builds its key on every call
        counter = self._counters.get((op, status))
        if counter is None:
            counter = self._counters[(op, status)] = self.requests.labels(op, str(status))
        latency = self._latencies.get(op)
        if latency is None:
            latency = self._latencies[op] = self.latency.labels(op)
        counter.inc()
        latency.observe(seconds)

    def render(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data
