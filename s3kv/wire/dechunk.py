"""A chunked HTTP/1.1 response body taken apart on its way in, its data landing in place.

:class:`Dechunker` sits between fastget's connection and the sink the chunks' data goes to.
Over a :class:`~s3kv.wire.landing.Landing` (the memory a body's bytes belong in), the
connection asks it for ``space()`` and it answers with the inner landing's memory, cut at the
current chunk's end, while the bytes to come are a chunk's data, and with a few bytes of its
own while they are framing (the CRLF closing a chunk and the next one's size line), so the
kernel never writes framing into the caller's memory and a chunk's data never has to be copied
out of the connection's buffer. Over a plain sink, chunk data is received into the
connection's buffer and passed on as views of it. Bytes received elsewhere (``__call__``) are
split the same way. The body is over (``done``) after the last, empty chunk and its trailer
section.
"""

from __future__ import annotations

from s3kv.wire.landing import FramedLanding, Sink, landing_of

#: a chunk's size line longer than this (extensions included) is refused
LINE_LIMIT = 4096
#: bytes read at once while the next bytes are framing: a CRLF and a size line of a chunk of
#: up to 4 GiB; the chunk data read with them is passed on
FRAMING_READ = 12

_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)
_HEX = frozenset(b"0123456789abcdefABCDEF")


class ChunkError(ValueError):
    """The body's chunked framing is malformed."""


class Dechunker(FramedLanding):
    """A Landing over a chunked body that passes the chunks' data to ``inner`` (in place where
    ``inner`` is a Landing)."""

    malformed = ChunkError

    def __init__(self, inner: Sink) -> None:
        super().__init__(FRAMING_READ)
        self._inner = inner
        self._landing = landing_of(inner)
        self.payload = 0  # the chunks' data bytes so far (the body's length, framing aside)
        self._state = _SIZE
        self._line = bytearray()
        self._crlf = b""  # of the CRLF closing a chunk's data, the bytes seen

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def _in_payload(self) -> bool:
        return self._state == _DATA

    def _over(self) -> bool:
        return self._state == _DONE

    def _payload_space(self) -> memoryview | None:
        return None if self._landing is None else self._landing.space()

    def _payload_landed(self, n: int) -> None:
        assert self._landing is not None  # only memory it offered is landed in
        self.payload += n
        self._landing.landed(n)

    def _payload_end(self) -> None:
        self._state = _DATA_END

    def _payload_take(self, data: memoryview) -> None:
        self.payload += len(data)
        self._inner(data)

    def _framing_from(self, data: memoryview) -> memoryview:
        if self._state != _DATA_END:
            return self._line_from(data)
        k = 2 - len(self._crlf)
        self._crlf += bytes(data[:k])
        if len(self._crlf) == 2:
            if self._crlf != b"\r\n":
                raise ChunkError("chunk data not followed by CRLF")
            self._crlf, self._state = b"", _SIZE
        return data[k:]

    def _line_from(self, data: memoryview) -> memoryview:
        """Take a size or trailer line's bytes off ``data``; act on the line once whole."""
        window = bytes(data[:LINE_LIMIT + 1 - len(self._line)])
        end = window.find(b"\n")
        if end < 0:
            self._line += window
            if len(self._line) > LINE_LIMIT:
                raise ChunkError("chunk size line too long")
            return data[len(window):]
        self._line += window[:end + 1]
        line, self._line = bytes(self._line), bytearray()
        if not line.endswith(b"\r\n"):
            raise ChunkError("chunk size line not ended by CRLF")
        if self._state == _TRAILER:
            if line == b"\r\n":
                self._state = _DONE
        else:
            size = line[:-2].split(b";", 1)[0].strip(b" \t")
            if not size or not set(size) <= _HEX or len(size) > 16:
                raise ChunkError(f"bad chunk size {size[:32]!r}")
            self._left = int(size, 16)
            self._state = _DATA if self._left else _TRAILER
        return data[end + 1:]
