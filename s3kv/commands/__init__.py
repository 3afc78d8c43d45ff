"""Subcommands of the ``s3kv`` CLI, one module each, each exposing ``register(subparsers)``."""
