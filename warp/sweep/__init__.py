"""``s3kv sweep``: throughput against client count, the way Warp's distributed runs measure it."""

from __future__ import annotations
