"""Command-line flags shared by ``s3kv bench TYPE`` and ``s3kv sweep``, and their profiles.

Size and count defaults depend on the target: with ``--endpoint`` they are Warp's (256 MiB
objects, 32 connections per client, 5-minute phases); without it a local S3 server is started
on loopback and a short local profile runs, so a first run finishes in about a minute.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from s3kv.argtypes import arg_type
from s3kv.sizes import KiB, MiB, format_size, parse_size
from warp.config import (
    DEFAULT_BUCKET,
    WARP_CONCURRENT,
    WARP_DURATION_S,
    WARP_OBJ_SIZE,
    BenchConfig,
    MixedRatio,
)
from warp.units import parse_duration


@dataclass(frozen=True)
class Profile:
    obj_size: int
    concurrent: int
    duration: float
    objects: int
    trim: float  # seconds dropped at each end of a phase by the analysis


WARP_PROFILE = Profile(WARP_OBJ_SIZE, WARP_CONCURRENT, WARP_DURATION_S, 2500, 2.0)
#: on the local server (moto, ~100 MiB/s PUT here): small objects, a few seconds per phase
LOCAL_PROFILE = Profile(512 * KiB, 4, 4.0, 64, 0.5)


_size = arg_type(parse_size)
_duration = arg_type(parse_duration)


def add_client_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("target")
    g.add_argument("--endpoint", metavar="URL[,URL...]", default="",
                   help="S3 endpoint(s), used round-robin per request (e.g. one per MinIO node). "
                        "Default: start a local S3 server on loopback and run the short local "
                        "profile. Credentials come from AWS_ACCESS_KEY_ID / "
                        "AWS_SECRET_ACCESS_KEY (or an AWS profile)")
    g.add_argument("--bucket", default=DEFAULT_BUCKET,
                   help=f"bucket to use; created if missing (default {DEFAULT_BUCKET})")
    g.add_argument("--region", default="", help="SigV4 signing region (default: AWS_REGION, "
                   "else us-east-1)")
    g.add_argument("--prefix", default="warp",
                   help="key prefix; each run writes under PREFIX/RUN-ID/ (default warp)")
    g = p.add_argument_group("load")
    g.add_argument("--obj-size", type=_size, default=None, metavar="SIZE",
                   help=f"object size, e.g. 256MiB (default {format_size(WARP_PROFILE.obj_size)}"
                        f" with --endpoint, {format_size(LOCAL_PROFILE.obj_size)} locally)")
    g.add_argument("--concurrent", type=int, default=None, metavar="N",
                   help=f"operations in flight per client, one connection each (default "
                        f"{WARP_PROFILE.concurrent} with --endpoint, {LOCAL_PROFILE.concurrent} "
                        "locally)")
    g.add_argument("--duration", type=_duration, default=None, metavar="DURATION",
                   help=f"how long each run or phase lasts: 30s, 5m (default "
                        f"{WARP_PROFILE.duration:g}s with --endpoint, {LOCAL_PROFILE.duration:g}s"
                        " locally)")
    g.add_argument("--part-size", type=_size, default=16 * MiB, metavar="SIZE",
                   help="PUTs larger than this are multipart uploads of parts this size, 4 parts "
                        "in flight per object as Warp's Go client does (default 16MiB; S3 "
                        "needs >= 5MiB)")
    g.add_argument("--disable-multipart", action="store_true",
                   help="upload every object with one PUT, whatever its size")
    g.add_argument("--range-size", type=_size, default=0, metavar="SIZE",
                   help="GET ranges of this size at aligned random offsets instead of whole "
                        "objects (default: whole objects)")
    g.add_argument("--objects", type=int, default=None, metavar="N",
                   help=f"size of the object set that get/stat/mixed/delete/list prepare and use "
                        f"(default {WARP_PROFILE.objects} with --endpoint, "
                        f"{LOCAL_PROFILE.objects} locally)")
    g.add_argument("--mixed-ratio", type=arg_type(MixedRatio.parse), default=MixedRatio(),
                   metavar="get=45,stat=30,put=15,delete=10",
                   help="operation weights of the mixed benchmark (default Warp's 45/30/15/10)")
    g.add_argument("--batch", type=int, default=100, metavar="N",
                   help="objects per DeleteObjects request in the delete benchmark (default 100)")
    g.add_argument("--retries", type=int, default=0, metavar="N",
                   help="retry connection errors and 5xx up to N times; retries are recorded "
                        "(default 0: every error is data, as in Warp)")
    g.add_argument("--request-timeout", type=_duration, default=0.0, metavar="DURATION",
                   help="give up on a response not read within this time (default: no limit)")
    g = p.add_argument_group("run")
    g.add_argument("--noclear", action="store_true",
                   help="keep the objects the run wrote (default: remove them afterwards)")
    g.add_argument("--autoterm", action="store_true",
                   help="end a run early once throughput is stable: every one of the last "
                        "--autoterm.dur seconds within --autoterm.pct %% of their mean")
    g.add_argument("--autoterm.dur", dest="autoterm_dur", type=_duration, default=10.0,
                   metavar="DURATION", help="stability window for --autoterm (default 10s)")
    g.add_argument("--autoterm.pct", dest="autoterm_pct", type=float, default=7.5,
                   metavar="PCT", help="stability threshold for --autoterm (default 7.5)")
    g.add_argument("--trim", type=_duration, default=None, metavar="DURATION",
                   help=f"seconds the analysis drops at each end of a run (default "
                        f"{WARP_PROFILE.trim:g}s as Warp with --endpoint, {LOCAL_PROFILE.trim:g}s"
                        " locally)")
    g.add_argument("--json", action="store_true", help="print results as JSON (for scripts)")


def endpoints_of(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(e.strip() for e in str(args.endpoint).split(",") if e.strip())


def profile_of(args: argparse.Namespace) -> Profile:
    base = WARP_PROFILE if endpoints_of(args) else LOCAL_PROFILE
    return Profile(
        obj_size=args.obj_size if args.obj_size is not None else base.obj_size,
        concurrent=args.concurrent if args.concurrent is not None else base.concurrent,
        duration=args.duration if args.duration is not None else base.duration,
        objects=args.objects if args.objects is not None else base.objects,
        trim=args.trim if args.trim is not None else base.trim)


def config_from_args(args: argparse.Namespace, op: str, endpoints: tuple[str, ...],
                     ) -> BenchConfig:
    prof = profile_of(args)
    return BenchConfig(
        op=op, endpoints=endpoints, bucket=args.bucket, region=args.region,
        obj_size=prof.obj_size, concurrent=prof.concurrent, duration=prof.duration,
        part_size=args.part_size, disable_multipart=args.disable_multipart,
        range_size=args.range_size, mixed=args.mixed_ratio, objects=prof.objects,
        batch=args.batch, noclear=args.noclear, prefix=args.prefix, autoterm=args.autoterm,
        autoterm_dur=args.autoterm_dur, autoterm_pct=args.autoterm_pct, retries=args.retries,
        request_timeout=args.request_timeout)
