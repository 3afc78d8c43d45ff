"""kvq with and without its compiled loops (``_kvq_native.c``), interleaved in one process.

On a shared, noisy machine two separate ``s3kv codec-bench`` runs are minutes apart and see
different loads; here both paths run the same blocks round after round, alternating which
goes first, and the figures are medians over rounds (each round's MB/s from
``time.process_time`` around encoding, then decoding, all of codec-bench's default synthetic
blocks: 8 blocks of 1 MiB, fp16/bf16). The ratio column is the median of the per-round
ratios (native / numpy), which load changes affect least. Both paths must give the same
bytes; the script checks that first (exit 1 otherwise).

    OPENBLAS_NUM_THREADS=1 python benchmarks/kvq_native.py [--rounds 21] [--json]

``--path native|numpy --rounds N`` runs one path only (for instruction counts: run under
``valgrind --tool=callgrind`` with two values of N and take the difference per round).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from s3kv.store.codecs import CodecSpec, codec_for, kvq_native
from s3kv.store.codecs.kvq_decode import decode
from s3kv.store.codecs.synth import synthetic_blocks, to_words

BITS = (2.0, 2.5, 3.0, 3.5, 4.0)
DTYPES = ("float16", "bfloat16")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--dtype", choices=DTYPES, action="append", dest="dtypes")
    ap.add_argument("--bits", type=float, action="append")
    ap.add_argument("--path", choices=("both", "native", "numpy"), default="both")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    nat = kvq_native.native
    if nat is None:
        print("the extension is not built (or S3KV_KVQ_NATIVE=0)", file=sys.stderr)
        return 1
    paths = {"numpy": None, "native": nat}
    if args.path != "both":
        paths = {args.path: paths[args.path]}
    blocks = synthetic_blocks(0, 4, 8, 512, 128)
    rows = []
    for dtype in args.dtypes or DTYPES:
        raws = [to_words(b, dtype) for b in blocks]
        mb = sum(len(r) for r in raws) / 1e6
        for bits in args.bits or BITS:
            codec = codec_for(CodecSpec("kvq", dtype=dtype, head_dim=128, bits=bits))
            outputs = {}
            for name, mod in paths.items():  # warm-up, and the same bytes from both paths
                kvq_native.native = mod
                enc = [codec.encode(r) for r in raws]
                outputs[name] = (enc, [decode(e) for e in enc])
            if len({repr(v) for v in outputs.values()}) != 1:
                print(f"{dtype} {bits:g} bits: the paths differ", file=sys.stderr)
                return 1
            enc_blocks = next(iter(outputs.values()))[0]
            speed: dict[str, dict[str, list[float]]] = {
                name: {"enc": [], "dec": []} for name in paths}
            for rnd in range(args.rounds):
                order = list(paths.items())
                for name, mod in order if rnd % 2 == 0 else order[::-1]:
                    kvq_native.native = mod
                    # each result dropped at once, as codec-bench does
                    t0 = time.process_time()
                    for r in raws:
                        codec.encode(r)
                    t1 = time.process_time()
                    for e in enc_blocks:
                        decode(e)
                    t_enc, t_dec = t1 - t0, time.process_time() - t1
                    speed[name]["enc"].append(mb / max(t_enc, 1e-9))
                    speed[name]["dec"].append(mb / max(t_dec, 1e-9))
            row: dict[str, object] = {"dtype": dtype, "bits": bits}
            for name in paths:
                for op in ("enc", "dec"):
                    row[f"{name}_{op}_mb_s"] = round(statistics.median(speed[name][op]), 1)
            if len(paths) == 2:
                for op in ("enc", "dec"):
                    ratios = [b / a for a, b in zip(speed["numpy"][op], speed["native"][op],
                                                    strict=True)]
                    row[f"{op}_ratio"] = round(statistics.median(ratios), 3)
            rows.append(row)
    kvq_native.native = nat
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    keys = [k for k in rows[0] if k not in ("dtype", "bits")]
    print(f"{'dtype':<9} {'bits':>4} " + " ".join(f"{k:>15}" for k in keys))
    for row in rows:
        print(f"{row['dtype']:<9} {row['bits']:>4g} "
              + " ".join(f"{row[k]:>15}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
