"""Where a response body's bytes go as fastget's connections receive them.

A body's bytes go to a :data:`Sink` (a callable given views of the connection's own receive
buffer). A sink whose class is also a :class:`Landing` offers the memory the next bytes belong
in, and the kernel receives them straight into it: no copy out of the connection's buffer. A
sink that is also :class:`Paced` is given the connection's pause and resume for reading, so
it can stop the bytes while its reader falls behind (bounded memory for what it holds).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol, cast, runtime_checkable

Sink = Callable[[memoryview], None]


@runtime_checkable
class Landing(Protocol):
    """A sink that can take body bytes in place."""

    def __call__(self, view: memoryview) -> None: ...

    def space(self) -> memoryview | None:
        """Writable memory for the next body bytes, at most as many as belong there; None:
        none now (they come through ``__call__``)."""
        ...

    def landed(self, n: int) -> None:
        """``n`` bytes were received into the start of the last ``space()``."""
        ...


@runtime_checkable
class Paced(Protocol):
    """A sink that may pause the connection's reading."""

    def pace(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        """The connection's ``pause_reading`` and ``resume_reading``, for this response."""
        ...


@functools.cache
def _is(cls: type, kind: type) -> bool:
    return issubclass(cls, kind)


def landing_of(sink: Sink) -> Landing | None:
    """``sink`` as a :class:`Landing` when its class takes bytes in place, else None. Decided
    once per class: ``isinstance`` against a runtime protocol walks the protocol's members on
    every call (~4 % of the gateway's CPU when it was asked once per ranged read)."""
    kind: type = type(sink)
    return cast(Landing, sink) if _is(kind, Landing) else None


def paced(sink: Sink) -> Paced | None:
    """``sink`` as a :class:`Paced` sink, else None (decided once per class)."""
    kind: type = type(sink)
    return cast(Paced, sink) if _is(kind, Paced) else None
