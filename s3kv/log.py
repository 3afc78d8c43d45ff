"""structlog set-up: JSON lines for services, a console renderer for people. Dotted event names."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

#: the lowest level emitted, as configure_logging set it (before: every level, structlog's default)
_min_level = logging.NOTSET


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    """Configure structlog once per process. ``fmt`` is ``json`` or ``console``."""
    global _min_level
    lvl = logging.getLevelName(level.upper())
    if not isinstance(lvl, int):
        lvl = logging.INFO
    _min_level = lvl
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    """A structlog logger bound to the module name (``module=s3kv.store.writer``)."""
    return structlog.get_logger(module=name)


def enabled(level: int) -> bool:
    """Would a line at ``level`` (``logging.DEBUG``, ...) be emitted? For per-request lines: a
    filtered call through a module's logger still assembles a bound logger (the loggers are
    lazy proxies, not cached, so that reconfiguring and capturing logs keep working)."""
    return level >= _min_level
