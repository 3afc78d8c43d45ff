"""``s3kv sweep --clients 1..8``: how an S3 endpoint scales with clients (Warp-style)."""

from __future__ import annotations

import argparse
import os
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    from warp.flags import LOCAL_PROFILE, add_client_flags

    p = subparsers.add_parser(
        "sweep", help="throughput vs number of clients: table, efficiency, knee, plot",
        description="For each client count and each op (default put then get) run one phase: "
                    "that many client processes (or remote `s3kv agent`s), started together, "
                    "each with --concurrent connections. Writes every phase's records, "
                    "summary.json, summary.csv and sweep.png to --out, and prints the table "
                    "with scaling efficiency E(n) = T(n) / (n * T(1)), the knee and the "
                    "saturation point. Without --endpoint a local S3 server is started on "
                    f"loopback and a short profile runs ({LOCAL_PROFILE.obj_size >> 10} KiB "
                    f"objects, {LOCAL_PROFILE.concurrent} connections per client, "
                    f"{LOCAL_PROFILE.duration:g} s phases: a minute or two for 1..8 clients). "
                    "With --endpoint, Warp's defaults: 256 MiB objects, 32 connections per "
                    "client, 5-minute phases. Ctrl-C stops cleanly and keeps what was recorded.")
    g = p.add_argument_group("sweep")
    g.add_argument("--clients", default="1..8", metavar="RANGE",
                   help="client counts: 1..8, 1,2,4,8 or 1..16:2 (default 1..8)")
    g.add_argument("--ops", default="put,get", metavar="OP[,OP...]",
                   help="ops to run per client count, in order: put, get, stat, list "
                        "(default put,get)")
    g.add_argument("--out", default="", metavar="DIR",
                   help="output directory (default ./sweep-YYYYmmdd-HHMMSS)")
    g.add_argument("--agents", default="", metavar="HOST:PORT[,HOST:PORT...]",
                   help="run clients on these `s3kv agent`s instead of local processes; "
                        "client i runs on agent i modulo their number")
    g.add_argument("--agent-token", default=os.environ.get("S3KV_AGENT_TOKEN", ""),
                   metavar="TOKEN", help="bearer token the agents expect "
                                         "[env S3KV_AGENT_TOKEN]")
    g.add_argument("--reference", default="", metavar="NAME|FILE",
                   help="reference curve to draw beside the measured one: a built-in one by "
                        "name (minio-qlc-8node: 8 MinIO nodes on QLC, Warp defaults) or a CSV "
                        "with clients, put_gib_s, get_gib_s (GiB/s)")
    add_client_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import sys
    import time
    from pathlib import Path

    from s3kv.outputs import output_dir
    from s3kv.reference import locate
    from warp.flags import config_from_args, endpoints_of, profile_of
    from warp.localserver import LocalS3Server
    from warp.sweep import summary
    from warp.sweep.coordinator import Sweep, SweepConfig
    from warp.units import parse_client_range

    clients = tuple(parse_client_range(args.clients))
    reference = str(locate(args.reference)) if args.reference else ""  # before any run
    ops = tuple(o.strip().lower() for o in args.ops.split(",") if o.strip())
    out = Path(args.out or time.strftime("sweep-%Y%m%d-%H%M%S"))
    endpoints = endpoints_of(args)
    server: LocalS3Server | None = None
    if not endpoints:
        if args.agents:
            from s3kv.errors import ConfigError

            raise ConfigError("--agents needs --endpoint (remote clients cannot reach a local "
                              "loopback server)")
        server = LocalS3Server()
        endpoints = (server.endpoint,)
    cfg = SweepConfig(  # every flag checked before a local server starts
        template=config_from_args(args, "put", endpoints), clients=clients, out=out, ops=ops,
        agents=tuple(a.strip() for a in args.agents.split(",") if a.strip()),
        agent_token=args.agent_token, reference=reference, trim=profile_of(args).trim,
        local_server=server is not None, progress=not args.json)
    if server is not None:
        server.start()
        print(f"no --endpoint: started a local S3 server at {server.endpoint}; running the "
              "short local profile", file=sys.stderr)
    try:
        output_dir(cfg.out, "--out")  # after the flags are checked, before the run
        outcome = asyncio.run(Sweep(cfg).run())
    finally:
        if server is not None:
            server.stop()
    if args.json:
        print((out / "summary.json").read_text())
    else:
        print(summary.to_text(outcome.phases), end="")
        print(f"Output: {out}/ (records per phase, summary.json, summary.csv, sweep.png)")
    if outcome.interrupted:
        return 130
    return 1 if outcome.errors else 0
