"""Counters the store keeps; the gateway exports them as metrics and through /v1/stats."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class StoreStats:
    blocks_put: int = 0
    blocks_landed: int = 0  # of those, received straight into their segment (landing.py)
    bytes_accepted: int = 0  # block bytes clients wrote (before codecs)
    bytes_stored: int = 0  # the same blocks after codecs
    backend_bytes_written: int = 0  # segment parts + sidecars + namespace records
    compaction_bytes: int = 0  # block bytes rewritten by compaction (included above)
    gets: int = 0
    hits: int = 0
    misses: int = 0
    checksum_failures: int = 0
    backend_errors: int = 0
    backend_reads: int = 0  # ranged GETs issued
    backend_read_bytes: int = 0
    segments_sealed: int = 0
    segments_failed: int = 0
    blocks_lost: int = 0  # write-back blocks dropped because their segment failed to upload
    evictions: int = 0  # segments evicted (capacity, TTL, low live ratio)
    evicted_bytes: int = 0
    compactions: int = 0
    tombstones_carried: int = 0  # written again before their segment was deleted (carry.py)
    backpressure_rejections: int = 0
    dram_hits: int = 0
    dram_misses: int = 0
    deletes: int = 0
    readahead_windows: int = 0  # read-ahead windows started (one ranged GET each)
    readahead_blocks: int = 0  # one-block reads served from a read-ahead window
    direct_located: int = 0  # blocks a client was sent to read from the backend (locate)

    @property
    def write_amplification(self) -> float:
        return self.backend_bytes_written / self.bytes_accepted if self.bytes_accepted else 0.0

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.gets if self.gets else 0.0

    def as_dict(self) -> dict[str, float]:
        out: dict[str, float] = dict(asdict(self))
        out["write_amplification"] = self.write_amplification
        out["hit_ratio"] = self.hit_ratio
        return out
