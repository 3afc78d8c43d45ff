"""s3kv: a KV-cache storage tier that packs inference KV blocks into large segment objects."""

__version__ = "0.1.0"

__all__ = ["__version__"]
