"""Whether a client takes any of the answer written to it: what both ways of sending one
(chunked.py's senders, plainlane.py's tick) cut a client that stopped reading by.

The client has taken what it has acknowledged: on Linux the socket's ``tcpi_bytes_acked``
(``TCP_INFO``). A fall in what the transport queues is not that: the kernel's send buffer grows
on its own (TCP's autotuning) and takes more of an answer from the transport while the client
reads nothing. Counted as progress, that put off the cut of such a client by a timeout or more,
and its blocks' memory with it. Where ``TCP_INFO`` cannot tell (another system, no socket), a
fall in the transport's queue stands for progress, as before. Taking means at least
``MIN_TAKE`` bytes, or all that waited: a client that reads nothing may still acknowledge a
trickle (here, 2 KiB more 2 s into a stall: its kernel found room in a full receive queue).
Nothing waiting on the client (the transport's queue and the kernel's unacknowledged bytes,
``SIOCOUTQ``, both empty) is not a stall either.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import socket
import sys
import termios
import time

#: struct tcp_info up to the end of tcpi_bytes_acked (a u64 at offset 120, Linux 4.1+)
_INFO_LEN = 128
_ACKED = slice(120, 128)
_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None)
#: bytes of an answer a client must take to have taken any (less, unless it is all that waited)
MIN_TAKE = 64 * 1024


def unacknowledged(fd: int) -> int:
    """Bytes written to the TCP socket ``fd`` that its peer has not acknowledged, sent or not
    (``SIOCOUTQ``); OSError where the socket cannot tell."""
    out = array.array("i", [0])
    fcntl.ioctl(fd, termios.TIOCOUTQ, out, True)
    return out[0]


class Uptake:
    """What the client on ``transport`` has taken of what was written to it."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._sock = transport.get_extra_info("socket")
        acked = self._acked()
        self._acks = acked is not None  # this socket tells what was acknowledged
        # what it had taken when it last took any
        self._mark = -transport.get_write_buffer_size() if acked is None else acked
        self._since = time.monotonic()  # the last take seen, moved on by the time away
        self._away: float | None = self._since  # the sender not waiting on the client since

    def took(self) -> bool:
        """Whether the client took ``MIN_TAKE`` bytes or more of the answer since it last did
        (or since this was made), or nothing of it waits on the client."""
        taken = self._taken()
        took = taken >= self._mark + MIN_TAKE or not self._waiting()
        if took:
            self._mark, self._since = taken, time.monotonic()
        else:  # the transport's queue, if that is the measure, grows as more is written
            self._mark = min(self._mark, taken)
        return took

    def away(self) -> None:
        """The sender stops waiting on the client (its next piece is not ready yet)."""
        self._away = time.monotonic()

    def back(self) -> None:
        """The sender waits on the client again: the time it was away is not the client's (a
        batch get's next block can be a slow backend read away, with less than ``MIN_TAKE``
        sent before it)."""
        if self._away is not None:
            self._since += time.monotonic() - self._away
            self._away = None

    def idle(self, look: bool = True) -> float:
        """Seconds the client has had the answer waiting on it since it last took any (the
        sender's time away not counted); without ``look``, as of the last look (no system
        call)."""
        if look:
            self.took()
        return time.monotonic() - self._since

    def _taken(self) -> int:
        """A count that grows as the client takes the answer."""
        if self._acks:
            acked = self._acked()
            return self._mark if acked is None else acked
        return -self._transport.get_write_buffer_size()

    def _acked(self) -> int | None:
        """Bytes the client has acknowledged on this connection, if the socket tells."""
        if self._sock is None or _TCP_INFO is None or self._transport.is_closing():
            return None
        try:
            info = self._sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _INFO_LEN)
        except OSError:
            return None
        return int.from_bytes(info[_ACKED], sys.byteorder) if len(info) >= _INFO_LEN else None

    def _waiting(self) -> int:
        """Bytes written that the client has not acknowledged: the transport's queue and what
        the kernel holds (0 for the kernel's share where it cannot tell)."""
        held = self._transport.get_write_buffer_size()
        if self._sock is None or self._transport.is_closing():  # its descriptor may be reused
            return held
        try:
            return held + unacknowledged(self._sock.fileno())
        except OSError:
            return held
