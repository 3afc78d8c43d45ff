"""Warp-style S3 load generator for s3kv.

Layers, each in its own module, data flowing one way:

- :mod:`warp.config`: the settings of one benchmark client (a dataclass, JSON round-trip);
- :mod:`warp.payload`: shared pre-generated payload buffers and checksums of what is written;
- :mod:`warp.s3`: a small S3 client on aiohttp, signing with :mod:`s3kv.wire.sigv4` and
  ``UNSIGNED-PAYLOAD`` so that payload hashing never bounds throughput, GETs and PUTs through
  the lean client of :mod:`s3kv.wire.fastget`; what an operation came to in
  :mod:`warp.opresult`;
- :mod:`warp.benchmarks`: one module per benchmark type (put, get, mixed, stat, delete, list),
  found through a small registry;
- :mod:`warp.runner` and :mod:`warp.client`: workers, op generation and one client process;
- :mod:`warp.records`: per-operation records in Warp's ``.csv.zst`` format;
- :mod:`warp.analysis`: Warp's analysis semantics on saved records;
- :mod:`warp.sweep`: the client-count sweep, remote agents, summary, plot.

`warp` is also the import name of NVIDIA's warp-lang; this package is the s3kv load generator.
"""

from __future__ import annotations

__all__: list[str] = []
