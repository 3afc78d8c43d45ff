"""The ``s3kv`` command. Each subcommand lives in ``s3kv/commands/<name>.py`` and registers itself.

This module only builds the parser, dispatches, and translates errors into exit codes:
0 success, 1 the command ran and found a failure (a check failed, a benchmark had errors),
2 bad usage or configuration, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from s3kv import __version__
from s3kv.errors import S3KVError

#: subcommand modules under s3kv.commands, in the order `--help` lists them
COMMANDS: tuple[str, ...] = (
    "serve",
    "bench",
    "sweep",
    "analyze",
    "agent",
    "tune",
    "plan",
    "doctor",
    "codec_bench",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s3kv",
        description=(
            "s3kv: a KV-cache storage tier for LLM inference. It packs KV blocks into large "
            "aligned segment objects on MinIO/S3 (or a local directory), serves them back by "
            "ranged reads, and measures and plans the storage behind it."
        ),
        epilog="Run `s3kv COMMAND --help` for the flags of a command.",
    )
    parser.add_argument("--version", action="version", version=f"s3kv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"s3kv.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"s3kv.commands.{name}":
                continue  # not built yet
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = args.func(args)
    except S3KVError as exc:
        print(f"s3kv {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"s3kv {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
