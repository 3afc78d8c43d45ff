"""``s3kv agent``: run sweep clients on this host for a remote ``s3kv sweep --agents``."""

from __future__ import annotations

import argparse
import os
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "agent", help="serve sweep clients for a remote `s3kv sweep --agents`",
        description="Listen for a sweep coordinator (`s3kv sweep --agents HOST:PORT,...`) and "
                    "run its benchmark clients on this host as separate processes, started at "
                    "the coordinator's synchronized time (clock offset measured per phase). "
                    "Records are sent back to the coordinator. Anyone who can reach the port "
                    "can make this host send load to an S3 endpoint: bind to a private network "
                    "and set a token.")
    p.add_argument("--listen", default="127.0.0.1:7761", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:7761; [::1]:7761 for IPv6; "
                        "0.0.0.0:7761 to accept remote coordinators)")
    p.add_argument("--token", default=os.environ.get("S3KV_AGENT_TOKEN", ""), metavar="TOKEN",
                   help="require this bearer token from coordinators [env S3KV_AGENT_TOKEN]")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from s3kv.argtypes import listen_address
    from warp.sweep.agent import serve

    asyncio.run(serve(*listen_address(args.listen), args.token))
    return 0
