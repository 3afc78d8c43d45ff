"""Where a response body's bytes go as fastget's connections receive them.

A body's bytes go to a :data:`Sink` (a callable given views of the connection's own receive
buffer). A sink whose class is also a :class:`Landing` offers the memory the next bytes belong
in, and the kernel receives them straight into it: no copy out of the connection's buffer. A
sink that is also :class:`Paced` is given the connection's pause and resume for reading, so
it can stop the bytes while its reader falls behind (bounded memory for what it holds).
:class:`FramedLanding` is the base of landings over bodies of framing and payload (a chunked
body: wire/dechunk.py; a batch-get stream of records: s3kv/client_stream.py).
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


class FramedLanding:
    """A Landing over a body of framing and payload (a chunked body, a stream of records): the
    payload's bytes are received where :meth:`_payload_space` offers memory, the framing's
    into a few bytes of its own (so the kernel never writes framing into the payload's memory
    and never reads past it into the connection's buffer). Subclasses parse what comes through
    :meth:`_framing_from` (the bytes that are not payload, from the scratch or received
    elsewhere) and keep ``_left``, the payload bytes still to come before the next framing.
    A ValueError from any call: the body is malformed."""

    #: what a malformed body raises
    malformed: type[ValueError] = ValueError

    def __init__(self, framing_read: int) -> None:
        self._scratch = memoryview(bytearray(framing_read))
        self._own = False  # the last space() was the scratch
        self._left = 0

    def __call__(self, view: memoryview) -> None:
        data = view
        while len(data):
            if self._in_payload():
                k = min(self._left, len(data))
                self._payload_take(data[:k])
                self._left -= k
                data = data[k:]
                if not self._left:
                    self._payload_end()
            elif self._over():
                raise self.malformed(f"{len(data)} bytes after the end of the body")
            else:
                data = self._framing_from(data)

    def _framing_from(self, data: memoryview) -> memoryview:
        """Parse framing off the start of ``data``; what is left of it."""
        raise NotImplementedError

    def _payload_take(self, data: memoryview) -> None:
        """Payload bytes received elsewhere (into the scratch, or the connection's buffer)."""
        raise NotImplementedError

    def _in_payload(self) -> bool:
        """Whether the next bytes are payload."""
        raise NotImplementedError

    def _over(self) -> bool:
        """Whether the body is over (no more bytes belong anywhere)."""
        raise NotImplementedError

    def _payload_space(self) -> memoryview | None:
        raise NotImplementedError

    def _payload_landed(self, n: int) -> None:
        """``n`` payload bytes landed; ``_left`` counts them off after."""
        raise NotImplementedError

    def _payload_end(self) -> None:
        """The payload before the next framing is in (``_left`` is 0)."""
        raise NotImplementedError

    def space(self) -> memoryview | None:
        if self._in_payload():
            self._own = False
            space = self._payload_space()
            return None if space is None else space[:self._left]
        if self._over():
            return None
        self._own = True
        return self._scratch

    def landed(self, n: int) -> None:
        if self._own:
            self(self._scratch[:n])
            return
        self._payload_landed(n)
        self._left -= n
        if not self._left:
            self._payload_end()
