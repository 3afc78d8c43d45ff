"""Prometheus metrics of the gateway: request counters and latency by operation, bytes in/out,
and the store's own counters and gauges read at scrape time. Names are prefixed ``s3kv_``."""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# store counters (monotonic) -> metric name and help
_COUNTERS = {
    "blocks_put": ("s3kv_blocks_put_total", "Blocks accepted"),
    "blocks_landed": ("s3kv_blocks_landed_total",
                      "Blocks received straight into their segment (file backend)"),
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
    "tombstones_carried": ("s3kv_tombstones_carried_total",
                           "Tombstones written again before the segment holding them was "
                           "deleted (so no restart brings back what they hid)"),
    "backpressure_rejections": ("s3kv_backpressure_rejections_total",
                                "Writes refused with SlowDown"),
    "dram_hits": ("s3kv_dram_hits_total", "DRAM-tier hits"),
    "dram_misses": ("s3kv_dram_misses_total", "DRAM-tier misses"),
    "uploads_paced": ("s3kv_uploads_paced_total",
                      "Part uploads held back while reads waited on the backend"),
    "shared_range_reads": ("s3kv_shared_range_reads_total",
                           "Ranged GETs served from another read of the same block"),
    "readahead_windows": ("s3kv_readahead_windows_total",
                          "Read-ahead windows read (one-block reads walking a segment)"),
    "readahead_blocks": ("s3kv_readahead_blocks_total",
                         "One-block reads served from a read-ahead window"),
    "direct_located": ("s3kv_direct_located_total",
                       "Blocks clients were sent to read from the backend themselves (locate)"),
}
_GAUGES = {
    "index_entries": ("s3kv_index_entries", "Blocks in the index"),
    "index_bytes": ("s3kv_index_bytes", "Bytes held by the index"),
    "open_segments": ("s3kv_open_segments", "Segments in memory (open or sealing)"),
    "open_segment_bytes": ("s3kv_open_segment_bytes", "Bytes of segments in memory"),
    "sealed_segments": ("s3kv_sealed_segments", "Sealed segments on the backend"),
    "sealed_bytes": ("s3kv_sealed_bytes", "Bytes of sealed segments on the backend"),
    "dram_bytes": ("s3kv_dram_bytes", "Bytes held by the DRAM tier"),
    "read_memory": ("s3kv_read_memory_bytes", "Bytes read from the backend or decoded, held now "
                    "(in flight or waiting for their client; reads wait at max_read_memory)"),
    "request_memory": ("s3kv_request_memory_bytes", "Bytes of request bodies and staged "
                       "multipart parts held now (writes get SlowDown at max_request_memory)"),
    "shared_read_bytes": ("s3kv_shared_read_bytes",
                          "Bytes of blocks kept briefly for the ranged GETs that follow"),
    "write_amplification": ("s3kv_write_amplification",
                            "Backend bytes written / block bytes accepted"),
    "backend_healthy": ("s3kv_backend_healthy", "1 when the backend answers"),
    "capacity_bytes": ("s3kv_capacity_bytes", "Capacity budget in bytes (0: unlimited; "
                       "lowered when the backend runs out of room)"),
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


class Tally:
    """A counter the event loop adds to (plain arithmetic: no lock, unlike a prometheus_client
    Counter, whose inc takes one)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class GatewayMetrics:
    """The front's request metrics, kept in plain numbers updated on the event loop (a request
    costs a few dict operations, not four locked prometheus_client updates) and turned into
    metric families at scrape time, which also runs on the loop."""

    def __init__(self, summary: Callable[[], dict[str, float]]) -> None:
        self.registry = CollectorRegistry()
        self.bytes_in = Tally()
        self.bytes_out = Tally()
        #: requests the plain lane answered (plainlane.py)
        self.plain_lane = Tally()
        #: body bytes received off the event loop (wire/landrecv.py)
        self.bytes_off_loop = Tally()
        #: batch-get block bytes checked and sent by the compiled loop (wire/blocksend.py)
        self.bytes_out_compiled = Tally()
        self._requests: dict[tuple[str, int], int] = {}
        #: op -> [count per bucket of _BUCKETS, then +Inf; sum of seconds]
        self._latency: dict[str, list[float]] = {}
        self.registry.register(_RequestCollector(self))
        self.registry.register(_StoreCollector(summary))

    def observe(self, op: str, status: int, seconds: float) -> None:
        key = (op, status)
        self._requests[key] = self._requests.get(key, 0) + 1
        latency = self._latency.get(op)
        if latency is None:
            latency = self._latency[op] = [0.0] * (len(_BUCKETS) + 2)
        latency[bisect_left(_BUCKETS, seconds)] += 1  # a bound's own value is in its bucket
        latency[-1] += seconds

    def families(self) -> Iterator[Metric]:
        """The request metrics as Prometheus families (names as prometheus_client's own
        Counter and Histogram gave them)."""
        requests = CounterMetricFamily("s3kv_requests", "HTTP requests by operation and status",
                                       labels=["op", "status"])
        for (op, status), n in sorted(self._requests.items()):
            requests.add_metric([op, str(status)], n)
        yield requests
        latency = HistogramMetricFamily("s3kv_request_duration_seconds",
                                        "Request latency by operation", labels=["op"])
        bounds = [str(float(b)) for b in _BUCKETS] + ["+Inf"]
        for op, counts in sorted(self._latency.items()):
            cumulative = list(itertools.accumulate(counts[:-1]))
            latency.add_metric([op], list(zip(bounds, cumulative, strict=True)),
                               sum_value=counts[-1])
        yield latency
        for name, doc, tally in (("s3kv_http_bytes_in", "Request body bytes received",
                                  self.bytes_in),
                                 ("s3kv_http_bytes_out", "Response body bytes sent",
                                  self.bytes_out),
                                 ("s3kv_plain_lane_requests", "Requests answered in the plain "
                                  "lane (plain object PUTs and GETs)", self.plain_lane),
                                 ("s3kv_http_bytes_in_off_loop", "Request body bytes received "
                                  "off the event loop by the compiled receive (landing bodies "
                                  "with 4 MiB or more to come)", self.bytes_off_loop),
                                 ("s3kv_http_bytes_out_compiled", "Batch-get block bytes "
                                  "checked and sent by the compiled send (blocks the backend "
                                  "lends as views of mapped segments)", self.bytes_out_compiled)):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], tally.value)
            yield family

    def render(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data


class _RequestCollector(Collector):
    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.families()
