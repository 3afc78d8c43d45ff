"""Codec specifications: what a namespace is configured with or a request declares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from s3kv.errors import ConfigError, InvalidInput

#: request headers the gateway accepts to declare a block's codec, dtype and head dimension
HEADER_CODEC = "x-s3kv-codec"
HEADER_DTYPE = "x-s3kv-dtype"
HEADER_HEAD_DIM = "x-s3kv-head-dim"
HEADER_BITS = "x-s3kv-kvq-bits"
CODEC_HEADERS = (HEADER_CODEC, HEADER_DTYPE, HEADER_HEAD_DIM, HEADER_BITS)

CODEC_NAMES = ("none", "zstd", "kvq")
KVQ_DTYPES = ("float16", "bfloat16")
KVQ_BITS = (2.0, 2.5, 3.0, 3.5, 4.0)
DEFAULT_SEED = 0x5EED_C0DEC

_DTYPE_ALIASES = {
    "float16": "float16", "fp16": "float16", "f16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
}


@dataclass(frozen=True)
class CodecSpec:
    """One codec and its parameters. ``kvq`` needs ``dtype`` and ``head_dim``."""

    name: str = "none"
    level: int = 3          # zstd: compression level (1..22; negative levels are faster)
    shuffle: bool = True    # zstd: split 16-bit values into high and low byte planes first
    dtype: str = ""         # kvq: "float16" | "bfloat16"
    head_dim: int = 0       # kvq: elements per vector (a multiple of 8; 32 for 2.5/3.5 bits)
    bits: float = 3.0       # kvq: effective index bits per element: 2, 2.5, 3, 3.5, 4
    seed: int = DEFAULT_SEED  # kvq: derives the rotations (never stored per block)

    def __post_init__(self) -> None:
        if self.name not in CODEC_NAMES:
            raise InvalidInput(f"unknown codec {self.name!r}: use one of {', '.join(CODEC_NAMES)}")
        if self.name == "zstd" and not -7 <= self.level <= 22:
            raise InvalidInput(f"zstd level {self.level} out of range -7..22")
        if self.name != "kvq":
            return
        if self.dtype not in (*KVQ_DTYPES, ""):
            raise InvalidInput(f"kvq needs dtype float16 or bfloat16, got {self.dtype!r}")
        if self.head_dim < 0 or self.head_dim % 8 or self.head_dim > 4096:
            raise InvalidInput(f"kvq head_dim must be a positive multiple of 8 (<= 4096), "
                               f"got {self.head_dim}")
        if float(self.bits) not in KVQ_BITS:
            raise InvalidInput(f"kvq bits must be one of 2, 2.5, 3, 3.5, 4, got {self.bits}")
        if self.bits != int(self.bits) and self.head_dim % 32:  # 0 (unset) passes
            raise InvalidInput(f"kvq bits={self.bits} needs head_dim a multiple of 32, "
                               f"got {self.head_dim}")
        if not 0 <= self.seed < 2**64:
            raise InvalidInput(f"kvq seed must be in 0..2**64-1, got {self.seed}")

    @property
    def lossy(self) -> bool:
        return self.name == "kvq"

    @property
    def shaped(self) -> bool:
        """kvq: dtype and head_dim are known (a namespace may leave them to each request)."""
        return self.name != "kvq" or (bool(self.dtype) and self.head_dim > 0)

    def render(self) -> str:
        """The text form :func:`parse_codec_spec` reads back."""
        if self.name == "zstd":
            return f"zstd:level={self.level},shuffle={int(self.shuffle)}"
        if self.name == "kvq":
            parts = [f"bits={self.bits:g}"]
            if self.dtype:
                parts.append(f"dtype={self.dtype}")
            if self.head_dim:
                parts.append(f"head_dim={self.head_dim}")
            parts.append(f"seed={self.seed}")
            return "kvq:" + ",".join(parts)
        return "none"


def _int(key: str, value: str) -> int:
    try:
        return int(value, 0)
    except ValueError:
        raise InvalidInput(f"codec parameter {key}={value!r} is not an integer") from None


def _bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise InvalidInput(f"codec parameter {key}={value!r} is not a boolean (use 0 or 1)")


def _dtype(value: str) -> str:
    dt = _DTYPE_ALIASES.get(value.strip().lower())
    if dt is None:
        raise InvalidInput(f"unsupported dtype {value!r}: kvq takes float16 or bfloat16")
    return dt


def _bits(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidInput(f"kvq bits={value!r} is not a number") from None


_PARAMS = {
    "zstd": {"level", "shuffle"},
    "kvq": {"bits", "dtype", "head_dim", "seed"},
    "none": set(),
}


def parse_codec_spec(text: str) -> CodecSpec:
    """Parse ``none``, ``zstd``, ``zstd:level=3,shuffle=1``,
    ``kvq:bits=3,dtype=bfloat16,head_dim=128[,seed=N]``. InvalidInput on anything else."""
    name, _, rest = text.strip().partition(":")
    name = name.strip().lower()
    if name not in _PARAMS:
        raise InvalidInput(f"unknown codec {name!r} in {text!r}: use none, zstd or kvq")
    kwargs: dict[str, object] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not eq or key not in _PARAMS[name]:
            allowed = ", ".join(sorted(_PARAMS[name])) or "none"
            raise InvalidInput(f"bad codec parameter {item!r} in {text!r} "
                               f"(parameters of {name}: {allowed})")
        if key in ("level", "head_dim", "seed"):
            kwargs[key] = _int(key, value.strip())
        elif key == "shuffle":
            kwargs[key] = _bool(key, value)
        elif key == "dtype":
            kwargs[key] = _dtype(value)
        else:
            kwargs[key] = _bits(value)
    return CodecSpec(name, **kwargs)  # type: ignore[arg-type]


def codec_from_headers(headers: Mapping[str, str],
                       default: CodecSpec | None = None) -> CodecSpec | None:
    """The codec of one PUT: the namespace's ``default``, refined by the request's headers.

    ``x-s3kv-codec`` names a codec in the text form (``zstd:level=5``, ``kvq``,
    ``none``); ``x-s3kv-dtype``, ``x-s3kv-head-dim`` and ``x-s3kv-kvq-bits`` declare the
    block's shape and bit width for kvq (they are ignored for lossless codecs). Unset
    parameters come from the namespace's spec. A request may always ask for a lossless codec,
    but kvq only in a namespace configured for kvq: a lossy codec is never applied to a
    namespace that did not ask for it. Header names match case-insensitively. Returns
    ``default`` when the request declares nothing; InvalidInput on a malformed declaration.
    """
    low = {k.lower(): v for k, v in headers.items()}
    text = low.get(HEADER_CODEC)
    shape = {k: low[h].strip() for k, h in (("dtype", HEADER_DTYPE),
                                             ("head_dim", HEADER_HEAD_DIM),
                                             ("bits", HEADER_BITS)) if h in low}
    if text is None and not shape:
        return default
    if text is not None:
        name = text.strip().partition(":")[0].strip().lower()
    else:
        name = default.name if default is not None else "none"
    if name == "kvq" and (default is None or default.name != "kvq"):
        raise InvalidInput(f"{HEADER_CODEC}: kvq is lossy and this namespace is not configured "
                           "for kvq; ask for none or zstd, or configure the namespace with kvq")
    merged: dict[str, str] = {}
    if default is not None and default.name == name:
        rendered = default.render().partition(":")[2]
        merged = dict(item.split("=", 1) for item in rendered.split(",") if item)
        if name == "kvq":
            merged = {k: v for k, v in merged.items() if v not in ("", "0")}
    if text is not None:
        for item in filter(None, (p.strip() for p in text.partition(":")[2].split(","))):
            key, eq, value = item.partition("=")
            if not eq:
                raise InvalidInput(f"bad codec parameter {item!r} in {HEADER_CODEC}: {text!r}")
            merged[key.strip().lower().replace("-", "_")] = value.strip()
    if name == "kvq":
        merged.update(shape)
    params = ",".join(f"{k}={v}" for k, v in merged.items())
    return parse_codec_spec(f"{name}:{params}" if params else name)


def check_default_codec(text: str) -> None:
    """The ``default_codec`` setting, checked here (config.py does not know the codecs):
    raises ConfigError."""
    try:
        parse_codec_spec(text)
    except InvalidInput as exc:
        raise ConfigError(f"default_codec: {exc}") from None
