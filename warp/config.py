"""The settings of one benchmark client: a frozen dataclass that round-trips through JSON.

The same object configures ``s3kv bench`` in process, a sweep's client processes (as a job
file) and remote ``s3kv agent`` clients (as a request body).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any

from s3kv.errors import ConfigError
from s3kv.sizes import MiB

#: Warp's defaults for a real cluster (the built-in reference curve minio-qlc-8node, in
#: s3kv/reference/, was made with them)
WARP_OBJ_SIZE = 256 * MiB
WARP_CONCURRENT = 32
WARP_DURATION_S = 300.0
DEFAULT_BUCKET = "warp-benchmark-bucket"
DEFAULT_SEED = 20191130  # payload seed: the same in every process of a run


@dataclass(frozen=True)
class MixedRatio:
    """Weights of a mixed run's operations (Warp's --get/--stat/--put/--delete-distrib)."""

    get: float = 45.0
    stat: float = 30.0
    put: float = 15.0
    delete: float = 10.0

    @classmethod
    def parse(cls, text: str) -> MixedRatio:
        """``get=45,stat=30,put=15,delete=10`` (any subset; omitted ops get weight 0)."""
        values = {"get": 0.0, "stat": 0.0, "put": 0.0, "delete": 0.0}
        for part in text.split(","):
            name, sep, num = part.partition("=")
            name = name.strip().lower()
            if not sep or name not in values:
                raise ConfigError(f"invalid --mixed-ratio part {part!r}: write get=45,stat=30,"
                                  "put=15,delete=10")
            try:
                values[name] = float(num)
            except ValueError:
                raise ConfigError(f"invalid weight in {part!r}") from None
            if values[name] < 0:
                raise ConfigError(f"negative weight in {part!r}")
        ratio = cls(**values)
        if ratio.get + ratio.stat + ratio.put + ratio.delete <= 0:
            raise ConfigError("--mixed-ratio: at least one weight must be positive")
        return ratio


@dataclass(frozen=True)
class BenchConfig:
    """One client's benchmark. Sizes in bytes, times in seconds."""

    op: str
    endpoints: tuple[str, ...]
    bucket: str = DEFAULT_BUCKET
    region: str = ""
    obj_size: int = WARP_OBJ_SIZE
    concurrent: int = WARP_CONCURRENT
    duration: float = WARP_DURATION_S
    part_size: int = 16 * MiB
    parts_in_flight: int = 4
    disable_multipart: bool = False
    range_size: int = 0
    mixed: MixedRatio = field(default_factory=MixedRatio)
    objects: int = 2500
    batch: int = 100
    noclear: bool = False
    prefix: str = "warp"
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    autoterm: bool = False
    autoterm_dur: float = 10.0
    autoterm_pct: float = 7.5
    retries: int = 0
    request_timeout: float = 0.0
    seed: int = DEFAULT_SEED
    client_id: str = "c1"
    #: the object set (GET/STAT/mixed) was uploaded beforehand (by a sweep's coordinator)
    prepared: bool = False
    #: remove what the run wrote when it ends (a sweep's coordinator does it itself)
    cleanup: bool = True

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ConfigError("at least one --endpoint is needed")
        for ep in self.endpoints:
            if not ep.startswith(("http://", "https://")):
                raise ConfigError(f"endpoint {ep!r} must start with http:// or https://")
        if self.concurrent < 1:
            raise ConfigError("--concurrent must be at least 1")
        if self.duration <= 0:
            raise ConfigError("--duration must be positive: a run of 0 s measures nothing")
        if self.retries < 0:
            raise ConfigError("--retries must be 0 or more")
        if self.obj_size < 1 and self.op not in ("list", "delete", "stat"):
            raise ConfigError("--obj-size must be at least 1 byte")
        if not self.disable_multipart and self.part_size < 1:
            raise ConfigError("--part-size must be positive")
        if self.range_size and self.range_size > self.obj_size:
            raise ConfigError("--range-size must not exceed --obj-size")
        if self.parts_in_flight < 1 or self.objects < 1 or self.batch < 1:
            raise ConfigError("--objects, --batch and parts in flight must be at least 1")
        if not self.prefix.strip("/"):
            raise ConfigError("--prefix must not be empty")

    # ---- object layout -------------------------------------------------------------------
    @property
    def run_prefix(self) -> str:
        """Everything this run writes lives under this prefix."""
        return f"{self.prefix.strip('/')}/{self.run_id}/"

    def object_key(self, index: int) -> str:
        """Key ``index`` of the prepared object set (GET, STAT, mixed, delete, list)."""
        return f"{self.run_prefix}set/{index:08d}.obj"

    def put_key(self, thread: int, seq: int) -> str:
        return f"{self.run_prefix}{self.client_id}/t{thread:03d}/{seq:08d}.obj"

    def multipart(self, size: int) -> bool:
        return not self.disable_multipart and size > self.part_size

    # ---- JSON round-trip -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ConfigError(f"unknown benchmark settings: {', '.join(sorted(unknown))}")
        values = dict(data)
        values["endpoints"] = tuple(values["endpoints"])
        if isinstance(values.get("mixed"), dict):
            values["mixed"] = MixedRatio(**values["mixed"])
        return cls(**values)

    def replace(self, **changes: Any) -> BenchConfig:
        return dataclasses.replace(self, **changes)
