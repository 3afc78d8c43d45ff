"""``s3kv codec-bench``: compression ratio, quality and speed of the block codecs.

The measurement is in :mod:`s3kv.store.codecs.bench`; the synthetic KV generator in
:mod:`s3kv.store.codecs.synth` (documented in docs/codecs.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from s3kv.errors import ConfigError
from s3kv.reference import locate
from s3kv.store.codecs import bench
from s3kv.store.codecs.synth import synthetic_blocks

DEFAULT_REFERENCE = "kv-quant-quality"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "codec-bench",
        help="compression ratio, cosine similarity, error and MB/s of the block codecs",
        description=(
            "Encode and decode KV tensors with each codec and print, per codec and bit width: "
            "the compression ratio (raw bytes / all stored bytes, headers, gains and codebooks "
            "included), the bits stored per element, the cosine similarity between original "
            "and decoded vectors (mean over all vectors, and the worst block's mean), the "
            "relative MSE (sum |x - x'|^2 / sum |x|^2) and encode/decode throughput in input MB "
            "per CPU-second (MB/s per core; 1 MB = 10^6 B). Inputs: synthetic KV blocks (per-"
            "channel scales, outlier channels, token magnitudes; see docs/codecs.md) and any "
            ".npy files given. kvq rows show the reference table's row for the same effective "
            "bits beside them, read from --reference."
        ),
    )
    p.add_argument("npy", nargs="*", type=Path, metavar="FILE.npy",
                   help="also measure these arrays (floats; last axis = head dim unless "
                        "--head-dim; cast to --dtype first)")
    p.add_argument("--codec", action="append", dest="codecs", metavar="SPEC",
                   help="a codec to measure, as in namespace configuration: none, "
                        "zstd:level=3,shuffle=1, kvq:bits=3 (repeatable; default: none, zstd "
                        "level 1 plain, zstd level 3 shuffled, kvq at 2, 2.5, 3, 3.5, 4 bits; "
                        "kvq's dtype and head_dim come from the data)")
    p.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16",
                   help="element type the blocks are stored in (default: float16)")
    p.add_argument("--head-dim", type=int, default=None, metavar="N",
                   help="synthetic head dimension, and the vector length of .npy inputs "
                        "(default: 128 for synthetic, the last axis for .npy)")
    p.add_argument("--layers", type=int, default=4, metavar="N",
                   help="synthetic layers; each gives a K block and a V block (default: 4)")
    p.add_argument("--heads", type=int, default=8, metavar="N",
                   help="synthetic KV heads per block (default: 8)")
    p.add_argument("--tokens", type=int, default=512, metavar="N",
                   help="synthetic tokens per block; a block is heads x tokens x head_dim "
                        "elements, 1 MiB at the defaults in fp16 (default: 512)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the synthetic generator (default: 0)")
    p.add_argument("--no-synthetic", action="store_true",
                   help="measure only the .npy files")
    p.add_argument("--block-vectors", type=int, default=4096, metavar="N",
                   help="vectors per block when splitting .npy inputs (default: 4096)")
    p.add_argument("--repeat", type=int, default=3, metavar="N",
                   help="encode/decode every block N times for the timings (default: 3)")
    p.add_argument("--reference", default=DEFAULT_REFERENCE, metavar="NAME|CSV",
                   help="reference quality table: a built-in one by name or a CSV with "
                        "effective_bits, compression_ratio, cosine_similarity (default: "
                        f"{DEFAULT_REFERENCE}, the table shipped with s3kv)")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if a kvq row's ratio or mean cosine is below its reference row")
    p.add_argument("--json", action="store_true",
                   help="print the rows as a JSON list instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for name in ("head_dim", "layers", "heads", "tokens", "block_vectors", "repeat"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive")
    try:
        ref_path = locate(args.reference)
    except ConfigError as exc:
        raise ConfigError(f"--reference: {exc}") from None
    reference = bench.load_reference(ref_path)
    sources: list[tuple[str, list[bench.F32]]] = []
    if not args.no_synthetic:
        sources.append(("synthetic", synthetic_blocks(args.seed, args.layers, args.heads,
                                                      args.tokens, args.head_dim or 128)))
    for path in args.npy:
        try:
            sources.append((path.stem[:12],
                            bench.load_npy(path, args.head_dim, args.block_vectors)))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from None
    if not sources:
        raise ConfigError("nothing to measure: give .npy files or drop --no-synthetic")
    rows = bench.run(args.codecs or bench.DEFAULT_CODECS, sources, args.dtype, args.repeat,
                     reference)
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        print(bench.render_table(rows))
    if args.check and any(r.meets_reference() is False for r in rows):
        return 1
    return 0
