"""An idle watchdog: one timer for a whole stream, not one per piece.

``asyncio.timeout`` around each awaited piece of a request body schedules, reschedules and
cancels a timer per piece (a few percent of the event loop under small PUTs).
:class:`IdleWatchdog` arms one timer for the stream; the reader calls :meth:`progress` (a clock
read) for each piece, and the timer, when it fires, re-arms itself from the last progress or,
if none came for ``idle`` seconds, cancels the task. Leaving the ``with`` block then raises
``TimeoutError`` instead of the ``CancelledError``, as ``asyncio.timeout`` does; a cancellation
that came from elsewhere propagates untouched.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class IdleWatchdog:
    """``with IdleWatchdog(seconds) as dog:`` ... ``dog.progress()`` after each piece."""

    def __init__(self, idle: float) -> None:
        self.idle = idle
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self._last = 0.0
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._timer: asyncio.TimerHandle | None = None

    def __enter__(self) -> IdleWatchdog:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("IdleWatchdog must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._last = self._loop.time()
        self._timer = self._loop.call_at(self._last + self.idle, self._check)
        return self

    def progress(self) -> None:
        """A piece arrived: the idle period starts again."""
        self._last = self._loop.time()

    def _check(self) -> None:
        deadline = self._last + self.idle
        if self._loop.time() < deadline:
            self._timer = self._loop.call_at(deadline, self._check)
            return
        self._timer = None
        self.expired = True
        assert self._task is not None
        self._task.cancel()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.expired and self._task is not None and \
                self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc
