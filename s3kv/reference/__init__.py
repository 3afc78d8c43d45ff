"""Reference data shipped with s3kv: published figures its reports compare against.

They are facts to compare with, not targets: a report prints them beside what it measured, never
in place of it. Each is found by name (or a CSV path of the same shape is given instead):

- ``minio-qlc-8node``: Warp PUT/GET GiB/s against client count on 8 MinIO nodes, 24 x 122.88 TB
  QLC drives each, 256 MiB objects, 32 connections per client, 15-minute phases (a published
  MinIO scaling run); drawn beside a sweep's curve by ``s3kv sweep --reference``;
- ``kv-quant-quality``: KV-cache quantization at head_dim 128, effective bits against compression
  ratio and cosine similarity (published TurboQuant-style figures); ``s3kv codec-bench`` shows
  the row of the same effective bits beside each kvq row.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from s3kv.errors import ConfigError

#: name -> file in this package
BUILTIN = {
    "minio-qlc-8node": "minio-qlc-8node-warp.csv",
    "kv-quant-quality": "kv-quant-quality.csv",
}


def locate(name_or_path: str | Path) -> Path:
    """The file of a built-in reference, or ``name_or_path`` itself when it is a file."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    file = BUILTIN.get(str(name_or_path))
    if file is None:
        raise ConfigError(f"reference {str(name_or_path)!r}: no such file, and not a built-in "
                          f"reference (built in: {', '.join(sorted(BUILTIN))})")
    return Path(str(resources.files(__name__).joinpath(file)))
