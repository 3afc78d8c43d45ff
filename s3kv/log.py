"""structlog set-up: JSON lines for services, a console renderer for people. Dotted event names."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import structlog

#: the lowest level emitted, as configure_logging set it (before: every level, structlog's default)
_min_level = logging.NOTSET
#: the libraries' own stdlib loggers (asyncio, aiohttp, botocore) are passed on from this level
LIBRARY_LEVEL = logging.WARNING


class _LibraryLines(logging.Handler):
    """A library's stdlib log record as a line of this process's format, so that a JSON log
    stays JSON (a traceback printed as text split a line per frame): event ``library.log``,
    ``module`` the library's logger, ``message`` its text."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            kw: dict[str, Any] = {"message": record.getMessage()}
            if record.exc_info:
                kw["exc_info"] = record.exc_info
            structlog.get_logger(module=record.name).log(record.levelno, "library.log", **kw)
        except Exception:  # logging's own contract: report, never raise
            self.handleError(record)


def loop_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's unhandled errors as lines of this process's format (``asyncio.unhandled``).
    A connection reset that no one retrieved is aiohttp's client writing a request body on a
    connection the server closed (radosgw restarting): the request itself failed and was
    handled where it was sent, so that one is ``asyncio.connection_reset_unretrieved`` at
    debug, not an error with a traceback for each."""
    exc = context.get("exception")
    log = structlog.get_logger(module="asyncio")
    message = str(context.get("message", ""))
    if isinstance(exc, ConnectionResetError) and "never retrieved" in message:
        log.debug("asyncio.connection_reset_unretrieved", error=str(exc))
        return
    log.error("asyncio.unhandled", message=message, exc_info=exc,
              where=repr(context.get("task") or context.get("future") or context.get("handle")))


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
    root = logging.getLogger()
    if not any(isinstance(h, _LibraryLines) for h in root.handlers):
        root.addHandler(_LibraryLines())
    root.setLevel(max(lvl, LIBRARY_LEVEL))


def get_logger(name: str) -> Any:
    """A structlog logger bound to the module name (``module=s3kv.store.writer``)."""
    return structlog.get_logger(module=name)


def enabled(level: int) -> bool:
    """Would a line at ``level`` (``logging.DEBUG``, ...) be emitted? For per-request lines: a
    filtered call through a module's logger still assembles a bound logger (the loggers are
    lazy proxies, not cached, so that reconfiguring and capturing logs keep working)."""
    return level >= _min_level
