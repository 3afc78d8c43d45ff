"""One settings object for the gateway and the store.

Precedence: CLI flags > environment (``S3KV_<NAME>``) > config file (TOML, keys are the field
names) > defaults. Every field carries its own help text and parser, so the CLI flags, the
environment names, the Helm chart's ConfigMap and the docs all come from this one table.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from s3kv.errors import ConfigError
from s3kv.sizes import GiB, KiB, MiB, format_size, parse_size

ENV_PREFIX = "S3KV_"
#: S3KV_* variables read by other parts than the gateway's settings: the config file, the
#: sweep agent's token, the kvq codec's switch, the LMCache plugin's options
OTHER_ENV = frozenset(ENV_PREFIX + n for n in (
    "CONFIG", "AGENT_TOKEN", "KVQ_NATIVE", "URL", "NAMESPACE", "LOOKUP_TIMEOUT", "TIMEOUT",
    "PUT_WITHIN", "DOWN_FOR", "CONNECTIONS"))
#: the longest a presigned URL may be valid (S3's limit), seconds
MAX_PRESIGN = 7 * 24 * 3600


def parse_bool(text: str) -> bool:
    """true/false, yes/no, on/off, 1/0 (any case; empty: false); ConfigError otherwise."""
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"invalid boolean {text!r}: use true/false")


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"invalid number {text!r}") from None


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"invalid integer {text!r}") from None


#: the values a config file (or a caller) may give a setting of each kind besides a string
_TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str, "size": int, "int": int, "float": (int, float), "bool": bool}

_PARSERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "size": parse_size,
    "int": _parse_int,
    "float": _parse_float,
    "bool": parse_bool,
}


def setting(default: Any, help: str, kind: str = "str", *, choices: tuple[str, ...] = (),
            metavar: str = "", secret: bool = False, shown: str = "") -> Any:
    """Declare a settings field with its help text and how to parse it from a string;
    ``shown``: the default as ``--help`` words it (when it is derived, not a value)."""
    return field(default=default, metadata={
        "help": help, "kind": kind, "choices": choices, "metavar": metavar, "secret": secret,
        "shown": shown,
    })


#: the largest block by default, when half the segment size is more
MAX_BLOCK_SIZE = 64 * MiB
#: the largest segment: the index keeps a block's offset in its segment in 32 bits
MAX_SEGMENT_SIZE = 4 * GiB
#: seconds a ranged read of the backend may go without a byte (``--read-stall``'s default)
READ_STALL = 5.0


@dataclass(frozen=True)
class Settings:
    """Gateway and store settings. See ``s3kv serve --help``."""

    listen: str = setting("127.0.0.1:9470", "address the gateway listens on", metavar="HOST:PORT")
    store: str = setting("", "backend store URL: s3://BUCKET/PREFIX?endpoint=URL[,URL...] or "
                         "file:///PATH (default: file://./s3kv-data, the embedded default)",
                         metavar="URL")
    domain: str = setting("", "base domain for virtual-hosted-style bucket addressing "
                          "(BUCKET.DOMAIN); empty: path-style only", metavar="DOMAIN")
    segment_size: int = setting(256 * MiB, "size of a full segment object; a multiple of "
                                "--part-size, at most 4GiB", "size", metavar="SIZE")
    part_size: int = setting(16 * MiB, "multipart part size for segment uploads (>= 5MiB on S3)",
                             "size", metavar="SIZE")
    block_align: int = setting(4 * KiB, "every block starts at a multiple of this inside its "
                               "segment", "size", metavar="SIZE")
    seal_after: float = setting(5.0, "seal an open segment at most this many seconds after its "
                                "first block", "float", metavar="SECONDS")
    capacity: int = setting(0, "capacity budget of the backend in bytes; whole segments are "
                            "evicted above it (0: unlimited)", "size", metavar="SIZE")
    ttl: float = setting(0.0, "evict segments sealed more than this many seconds ago (0: never)",
                         "float", metavar="SECONDS")
    dram_cache: int = setting(0, "size of the in-memory LRU of hot blocks (0 disables the DRAM "
                              "tier)", "size", metavar="SIZE")
    dram_fill: str = setting("write", "when blocks enter the DRAM tier: write (as they are "
                             "written, and when read from the backend) or read (only when read "
                             "from the backend)", choices=("write", "read"))
    max_block_size: int = setting(0, "largest block (object) accepted; at most half of "
                                  "segment_size", "size", metavar="SIZE",
                                  shown="the smaller of 64MiB and half of segment_size")
    max_request_memory: int = setting(512 * MiB, "request bodies and staged multipart parts "
                                      "held at once; past it writes get 503 SlowDown", "size",
                                      metavar="SIZE")
    max_read_memory: int = setting(512 * MiB, "blocks read from the backend held at once, in "
                                   "flight or waiting for a client to take them; past it reads "
                                   "wait (a client that stops reading is cut after 20 s)",
                                   "size", metavar="SIZE")
    read_ahead: int = setting(32 * MiB, "bytes of a segment read with one ranged GET when "
                              "one-block reads walk it in order (a prefix restored one object "
                              "per block); up to four such windows are held (0: off)", "size",
                              metavar="SIZE")
    direct_reads: int = setting(0, "let native-API clients read sealed blocks stored without "
                                "a codec straight from the S3 backend: `locate` answers "
                                "presigned ranged-GET URLs valid this many seconds (0: off; "
                                "the clients must reach the backend's endpoint; see "
                                "docs/api.md)", "int", metavar="SECONDS")
    default_codec: str = setting("none", "codec of namespaces created without an x-s3kv-codec "
                                 "header: none, zstd[:level=N,shuffle=0|1] or "
                                 "kvq:bits=B,dtype=float16|bfloat16,head_dim=D (lossy)",
                                 metavar="SPEC")
    max_open_segments: int = setting(2, "segments held in memory at once (open + sealing); "
                                     "bounds write-path memory", "int", metavar="N")
    max_parts_in_flight: int = setting(4, "multipart part uploads in flight at once", "int",
                                       metavar="N")
    parts_in_flight_reading: int = setting(
        1, "part uploads started while reads of this gateway wait on the backend (reads go "
        "first; at most max_parts_in_flight, which turns the pacing off)", "int", metavar="N")
    compact_threshold: float = setting(0.25, "with --capacity set, a sealed segment whose live "
                                       "bytes fall below this share is dropped or compacted "
                                       "(0: never; fully dead segments always go)", "float",
                                       metavar="RATIO")
    compact_mode: str = setting("compact", "what to do with mostly-dead segments: drop them, or "
                                "compact (rewrite their hot live blocks, then drop)", "str",
                                choices=("drop", "compact"))
    sync_interval: float = setting(10.0, "seconds between scans for manifests written by other "
                                   "replicas (0: never)", "float", metavar="SECONDS")
    node_id: str = setting("", "this replica's id, unique per gateway (default: hostname plus a "
                           "random suffix); with a stable id, a restart aborts its own "
                           "unfinished uploads at once", metavar="ID")
    backend_timeout: float = setting(30.0, "seconds before one backend request is abandoned",
                                     "float", metavar="SECONDS")
    read_stall: float = setting(READ_STALL, "seconds a ranged read of the backend may go without a "
                                "byte before it is given up as a miss (not retried): a hung S3 "
                                "server costs a restore this long, not --backend-timeout; 0: "
                                "off", "float", metavar="SECONDS")
    idle_timeout: float = setting(75.0, "seconds a client connection may stay idle between "
                                  "requests before the gateway closes it; behind a proxy or "
                                  "load balancer that keeps connections to the gateway open, "
                                  "set it above that proxy's idle timeout", "float",
                                  metavar="SECONDS")
    etag: str = setting("md5", "ETag of S3 PUTs: md5 (the hex MD5 of the body, as S3; about "
                        "1.6 ms of CPU per MiB) or fast (CRC-32 and size: breaks clients that "
                        "compare the ETag with an MD5, such as s3cmd, rclone check and "
                        "ETag-based sync checks; see docs/tuning.md)", choices=("md5", "fast"))
    log_format: str = setting("console", "log output format", choices=("json", "console"))
    log_level: str = setting("info", "log level", choices=("debug", "info", "warning", "error"))
    access_key: str = setting("", "front-end access key clients sign with (SigV4)",
                              metavar="KEY")
    secret_key: str = setting("", "front-end secret key (prefer the environment variable)",
                              metavar="SECRET", secret=True)
    credentials_file: str = setting("", "TOML file of further front credentials, each limited "
                                    "to namespaces (bucket names or globs): [[credential]] "
                                    "access_key, secret_key, namespaces = [\"team-a-*\"]; "
                                    "read at start", metavar="PATH")

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def field_specs(cls) -> list[dataclasses.Field[Any]]:
        return list(fields(cls))

    @staticmethod
    def env_name(name: str) -> str:
        return ENV_PREFIX + name.upper()

    @classmethod
    def env_names(cls) -> set[str]:
        return {cls.env_name(f.name) for f in fields(cls)}

    @classmethod
    def unknown_env(cls, env: Mapping[str, str] | None = None) -> list[str]:
        """The S3KV_* variables set that name no setting and nothing else s3kv reads: most
        likely misspelt, and the gateway runs without them (``s3kv serve`` warns)."""
        env = os.environ if env is None else env
        known = cls.env_names() | OTHER_ENV
        return sorted(n for n in env if n.startswith(ENV_PREFIX) and n not in known)

    @classmethod
    def parse_value(cls, name: str, raw: Any) -> Any:
        spec = {f.name: f for f in fields(cls)}.get(name)
        if spec is None:
            raise ConfigError(f"unknown setting {name!r}")
        kind = spec.metadata["kind"]
        if isinstance(raw, str):
            try:
                value = _PARSERS[kind](raw)
            except ConfigError as exc:
                raise ConfigError(f"{name}: {exc}") from None
        elif isinstance(raw, bool) != (kind == "bool") or not isinstance(raw, _TYPES[kind]):
            # a config file's value of another type (a list, a table, true for a number)
            raise ConfigError(f"{name}: {raw!r} is no {kind} (write it as in --help)")
        elif kind == "size" and isinstance(raw, int):
            value = parse_size(raw)
        elif kind == "float" and isinstance(raw, (int, float)):
            value = float(raw)
        else:
            value = raw
        choices = spec.metadata["choices"]
        if choices and value not in choices:
            raise ConfigError(f"{name}: {value!r} is not one of {', '.join(choices)}")
        return value

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None,
             env: Mapping[str, str] | None = None, config_file: str | Path | None = None
             ) -> Settings:
        """Merge defaults < config file < environment < overrides (CLI flags; None = unset)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        path = config_file or env.get(ENV_PREFIX + "CONFIG")
        if path:
            try:
                data = tomllib.loads(Path(path).read_text())
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"cannot read config file {path}: {exc}") from None
            for key, raw in data.items():
                values[key] = cls.parse_value(key, raw)
        for f in fields(cls):
            raw_env = env.get(cls.env_name(f.name))
            if raw_env is not None:
                values[f.name] = cls.parse_value(f.name, raw_env)
        for key, raw in (overrides or {}).items():
            if raw is not None:
                values[key] = cls.parse_value(key, raw)
        settings = cls(**values)
        settings.validate()
        return settings

    def __post_init__(self) -> None:
        if self.max_block_size == 0:  # not set: follow the segment size
            object.__setattr__(self, "max_block_size",
                               min(MAX_BLOCK_SIZE, self.segment_size // 2))

    def validate(self) -> None:
        """What can be checked without knowing the store or the gateway; the settings they
        own (the default codec, the credentials) are checked by them at start-up
        (:func:`s3kv.gateway.server.check_settings`)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.metadata["kind"] == "float" and not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{f.name} must be a finite number, 0 or more: not {value!r}")
        if not 1 <= self.segment_size <= MAX_SEGMENT_SIZE:
            raise ConfigError(f"segment_size must be positive and at most "
                              f"{format_size(MAX_SEGMENT_SIZE)} (the index keeps 32-bit offsets "
                              f"within a segment): not {format_size(self.segment_size)}")
        if self.backend_timeout <= 0:
            raise ConfigError("backend_timeout must be positive (seconds)")
        if self.part_size < 1 or self.segment_size % self.part_size:
            raise ConfigError(
                f"segment_size ({self.segment_size}) must be a multiple of part_size "
                f"({self.part_size})")
        if self.block_align < 1 or self.block_align & (self.block_align - 1):
            raise ConfigError(f"block_align ({self.block_align}) must be a power of two")
        if self.max_block_size > self.segment_size // 2:
            raise ConfigError(
                f"max_block_size ({format_size(self.max_block_size)}) must be at most half of "
                f"segment_size ({format_size(self.segment_size)}) so that full segments stay "
                f"full: lower --max-block-size to {format_size(self.segment_size // 2)} or less "
                f"(or leave it unset: it follows the segment size), or raise --segment-size to "
                f"at least {format_size(2 * self.max_block_size)}")
        if self.seal_after <= 0:
            raise ConfigError("seal_after must be positive")
        if self.max_read_memory < max(4 * self.read_ahead, self.max_block_size):
            raise ConfigError(
                f"max_read_memory ({format_size(self.max_read_memory)}) must hold the largest "
                f"block and the four read-ahead windows a walk may keep: at least "
                f"{format_size(max(4 * self.read_ahead, self.max_block_size))} (or lower "
                "--read-ahead)")
        if self.max_request_memory < self.max_block_size:
            raise ConfigError(
                f"max_request_memory ({format_size(self.max_request_memory)}) must hold the "
                f"largest block, max_block_size ({format_size(self.max_block_size)}): every "
                "larger write would be answered 503 SlowDown for ever; raise "
                "--max-request-memory or lower --max-block-size")
        if self.idle_timeout <= 0:
            raise ConfigError("idle_timeout must be positive (seconds)")
        if self.max_open_segments < 1 or self.max_parts_in_flight < 1:
            raise ConfigError("max_open_segments and max_parts_in_flight must be >= 1")
        if not 1 <= self.parts_in_flight_reading <= self.max_parts_in_flight:
            raise ConfigError(
                f"parts_in_flight_reading ({self.parts_in_flight_reading}) must be between 1 "
                f"and max_parts_in_flight ({self.max_parts_in_flight}); set both to the same "
                "value for a fixed count")
        if not 0 <= self.direct_reads <= MAX_PRESIGN:
            raise ConfigError(f"direct_reads ({self.direct_reads}) must be between 0 (off) and "
                              f"{MAX_PRESIGN} seconds (7 days, the longest a presigned URL "
                              "may live)")
        if not 0.0 <= self.compact_threshold < 1.0:
            raise ConfigError("compact_threshold must be in [0, 1)")
        if self.capacity and self.capacity < 2 * self.segment_size:
            raise ConfigError(
                f"capacity ({self.capacity}) must hold at least two segments "
                f"({2 * self.segment_size} bytes) or be 0 for unlimited")

    @property
    def held_memory(self) -> int:
        """Bytes these settings let a gateway hold under load: request bodies, blocks read,
        the DRAM tier and the open segments (docs/operations.md, sizing)."""
        return (self.max_request_memory + self.max_read_memory + self.dram_cache
                + self.max_open_segments * self.segment_size)

    @property
    def replica_lag(self) -> float:
        """Seconds a write may take to reach the other replicas: sealed (``seal_after``),
        uploaded (riding out an outage up to ``backend_timeout``), listed (``sync_interval``)."""
        return self.seal_after + self.backend_timeout + self.sync_interval

    def public_dict(self) -> dict[str, Any]:
        """The settings with secrets masked, for logs and `stats`."""
        out = dataclasses.asdict(self)
        for f in fields(self):
            if f.metadata["secret"] and out[f.name]:
                out[f.name] = "***"
        return out


def add_settings_arguments(parser: argparse.ArgumentParser, names: list[str] | None = None) -> None:
    """Add one ``--flag`` per settings field (or the named ones), with help and env names."""
    for f in fields(Settings):
        if names is not None and f.name not in names:
            continue
        flag = "--" + f.name.replace("_", "-")
        meta = f.metadata
        default = f.default
        shown = meta["shown"] or _show_default(meta["kind"], default)
        help_text = f"{meta['help']} [env {Settings.env_name(f.name)}; default {shown}]"
        kwargs: dict[str, Any] = {"dest": f.name, "default": None, "help": help_text}
        if meta["choices"]:
            kwargs["choices"] = meta["choices"]
        if meta["metavar"]:
            kwargs["metavar"] = meta["metavar"]
        parser.add_argument(flag, **kwargs)


def _show_default(kind: str, value: Any) -> str:
    if kind == "size":
        return format_size(value) if value else "0"
    if value == "":
        return "unset"
    return str(value)


__all__ = ["GiB", "KiB", "MiB", "Settings", "add_settings_arguments", "setting"]
