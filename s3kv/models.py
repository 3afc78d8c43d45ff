"""KV-cache geometry of the models s3kv plans and benchmarks for.

A decoder with grouped-query attention keeps, for every token, one key and one value vector per
layer and per KV head::

    kv_bytes_per_token = layers * kv_heads * head_dim * 2 (K and V) * dtype_bytes

With tensor parallelism the KV heads are split across ranks, so each rank holds (and offloads)
``kv_heads / tp`` of them; when ``tp`` exceeds the KV-head count, inference engines replicate
heads and each rank holds one. A KV block of ``block_tokens`` tokens on one rank is therefore
``kv_bytes_per_token(model, tp) * block_tokens`` bytes.

Figures are from the models' published configs (``config.json``: ``num_hidden_layers``,
``num_key_value_heads``, ``head_dim`` or ``hidden_size / num_attention_heads``) at bf16 (2 bytes).
Models with a different attention layout (MLA, sliding windows) do not fit this formula and are
not listed; pass ``--bytes-per-token`` for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from s3kv.errors import ConfigError

__all__ = [
    "MODELS",
    "ModelGeometry",
    "block_bytes",
    "get_model",
    "kv_bytes_per_token",
    "model_names",
]


@dataclass(frozen=True, slots=True)
class ModelGeometry:
    """The attention shape that sets a model's KV-cache size."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2  # bf16/fp16; 1 for an fp8 KV cache
    hf_id: str = ""  # where the figures come from

    def __post_init__(self) -> None:
        for field in ("layers", "kv_heads", "head_dim", "dtype_bytes"):
            if getattr(self, field) <= 0:
                raise ConfigError(f"model {self.name!r}: {field} must be positive")

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token for the whole model (all layers, all KV heads, K and V)."""
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes


MODELS: dict[str, ModelGeometry] = {
    m.name: m
    for m in (
        # 32 x 8 x 128 x 2 x 2 = 131072 B = 128 KiB
        ModelGeometry("llama3.1-8b", 32, 8, 128, hf_id="meta-llama/Llama-3.1-8B-Instruct"),
        # 80 x 8 x 128 x 2 x 2 = 327680 B = 320 KiB
        ModelGeometry("llama3.1-70b", 80, 8, 128, hf_id="meta-llama/Llama-3.1-70B-Instruct"),
        # 126 x 8 x 128 x 2 x 2 = 516096 B = 504 KiB
        ModelGeometry("llama3.1-405b", 126, 8, 128, hf_id="meta-llama/Llama-3.1-405B-Instruct"),
        # 28 x 4 x 128 x 2 x 2 = 57344 B = 56 KiB
        ModelGeometry("qwen2.5-7b", 28, 4, 128, hf_id="Qwen/Qwen2.5-7B-Instruct"),
        # 80 x 8 x 128 x 2 x 2 = 327680 B = 320 KiB
        ModelGeometry("qwen2.5-72b", 80, 8, 128, hf_id="Qwen/Qwen2.5-72B-Instruct"),
    )
}


def model_names() -> list[str]:
    """Names accepted by :func:`get_model` (and by ``--model``), in table order."""
    return list(MODELS)


def get_model(name: str) -> ModelGeometry:
    """The geometry of a listed model; case-insensitive. ConfigError names the known models."""
    model = MODELS.get(name.strip().lower())
    if model is None:
        raise ConfigError(
            f"unknown model {name!r}: use one of {', '.join(MODELS)} "
            "(or give --bytes-per-token for another model)"
        )
    return model


def kv_bytes_per_token(model: ModelGeometry | str, tp: int = 1) -> int:
    """KV bytes per token held by ONE tensor-parallel rank (the whole model when ``tp == 1``).

    ``tp`` must divide the KV-head count, or be a multiple of it (heads are then replicated and
    each rank holds one), as inference engines require.
    """
    geometry = get_model(model) if isinstance(model, str) else model
    if tp <= 0:
        raise ConfigError(f"tp must be a positive integer, got {tp}")
    heads = geometry.kv_heads
    if tp <= heads:
        if heads % tp:
            raise ConfigError(
                f"tp={tp} does not divide the {heads} KV heads of {geometry.name}"
            )
        heads_per_rank = heads // tp
    else:
        if tp % heads:
            raise ConfigError(
                f"tp={tp} is not a multiple of the {heads} KV heads of {geometry.name}"
            )
        heads_per_rank = 1
    return geometry.layers * heads_per_rank * geometry.head_dim * 2 * geometry.dtype_bytes


def block_bytes(model: ModelGeometry | str, block_tokens: int, tp: int = 1) -> int:
    """Bytes of one KV block of ``block_tokens`` tokens on one rank."""
    if block_tokens <= 0:
        raise ConfigError(f"block_tokens must be a positive integer, got {block_tokens}")
    return kv_bytes_per_token(model, tp) * block_tokens
