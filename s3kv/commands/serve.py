"""``s3kv serve``: run the gateway."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from s3kv.config import Settings, add_settings_arguments
from s3kv.log import configure_logging, get_logger


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "serve", help="run the gateway (S3-compatible front + native batch API)",
        description=(
            "Run the s3kv gateway: an S3-compatible front (bucket = namespace) and a native "
            "batch API under /v1, in front of the block store. Without --store it keeps "
            "segments in ./s3kv-data (the embedded default) and listens on loopback only. "
            "Every flag is also an environment variable S3KV_<NAME>; a TOML config file can be "
            "named with --config or S3KV_CONFIG. Backend credentials come from the standard "
            "AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or profile; front "
            "credentials from S3KV_ACCESS_KEY and S3KV_SECRET_KEY."))
    p.add_argument("--config", metavar="FILE", default=None,
                   help="TOML file of settings (keys are the flag names with underscores)")
    add_settings_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from s3kv.gateway.server import serve

    overrides = {f.name: getattr(args, f.name) for f in Settings.field_specs()}
    settings = Settings.load(overrides, config_file=args.config)
    configure_logging(settings.log_format, settings.log_level)
    unknown = Settings.unknown_env()
    if unknown:  # a misspelt variable would go unnoticed: its setting keeps its default
        get_logger(__name__).warning(
            "config.unknown_env", variables=unknown,
            hint="not a setting: see `s3kv serve --help` for the S3KV_<NAME> of each flag")
    return asyncio.run(serve(settings))
