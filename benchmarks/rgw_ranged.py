"""How fast the S3 server serves ranged reads of one segment-sized object, by range size and
streams: the ceiling of any restore that reads its blocks from the server.

Writes one ``--object-size`` object (multipart in 16 MiB parts, as the gateway writes a
segment; ``--single-put``: one PUT), then reads all of it ``--repeats`` times per (streams,
range size) case with boto3 ranged GETs from a thread pool, and reports MiB/s and the server's
CPU-seconds per GiB read (RGW: radosgw + OSD + mon). With ``--split-cores`` the server runs on
one CPU and this client on the other.

    python benchmarks/rgw_ranged.py --server rgw --split-cores --json
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3

from benchmarks.harness import CPUMeter, add_arguments, apply_topology, server_from_args
from s3kv.sizes import GiB, MiB, format_size, parse_size

PART = 16 * MiB
#: (streams, range size) cases
CASES = ((1, 64 * MiB), (4, 64 * MiB), (8, 16 * MiB), (8, 1 * MiB))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--object-size", type=parse_size, default=256 * MiB, metavar="SIZE",
                   help="bytes of the object read [default: 256MiB]")
    p.add_argument("--single-put", action="store_true",
                   help="write the object with one PUT instead of 16 MiB parts")
    p.add_argument("--repeats", type=int, default=2, metavar="N",
                   help="reads of the whole object per case; figures are medians [default: 2]")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = p.parse_args(argv)
    size = args.object_size - args.object_size % PART or PART
    with server_from_args(args) as server:
        topology = apply_topology(server, args.split_cores, args.server_cpus).describe()
        s3 = boto3.client("s3", **server.client_kwargs())
        bucket, key = f"ranged-{uuid.uuid4().hex[:8]}", "segment"
        s3.create_bucket(Bucket=bucket)
        part = os.urandom(PART)
        if args.single_put:
            s3.put_object(Bucket=bucket, Key=key, Body=part * (size // PART))
        else:
            up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
            parts = [{"PartNumber": i + 1, "ETag": s3.upload_part(
                Bucket=bucket, Key=key, UploadId=up, PartNumber=i + 1, Body=part)["ETag"]}
                for i in range(size // PART)]
            s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                         MultipartUpload={"Parts": parts})
        meter = CPUMeter.for_run(server)

        def read(start: int, n: int) -> None:
            end = min(start + n, size) - 1
            body = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end}")["Body"]
            while body.read(MiB):
                pass

        cases: list[dict[str, Any]] = []
        for streams, rng in CASES:
            rates, cpus = [], []
            for _ in range(args.repeats):
                before, t0 = meter.sample(), time.perf_counter()
                with cf.ThreadPoolExecutor(streams) as pool:
                    list(pool.map(read, range(0, size, rng), [rng] * -(-size // rng)))
                seconds = time.perf_counter() - t0
                used = meter.delta(before, meter.sample())
                rates.append(size / MiB / seconds)
                cpus.append(used["server"] * GiB / size)
            cases.append({"streams": streams, "range": format_size(rng),
                          "MiB_s": round(statistics.median(rates), 1),
                          "server_cpu_s_per_GiB": round(statistics.median(cpus), 3)})
    out = {"server": server.name, "object": format_size(size),
           "multipart": not args.single_put, **topology, "cases": cases}
    if args.json:
        print(json.dumps(out))
    else:
        for c in cases:
            print(f"{c['streams']} streams of {c['range']}: {c['MiB_s']} MiB/s, server "
                  f"{c['server_cpu_s_per_GiB']} CPU-s/GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
