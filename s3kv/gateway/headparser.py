"""The request parser of the S3 front's connections: aiohttp's, taking one head RFC 9112 lets a
server take and aiohttp's parser (llhttp) refuses.

A request whose Content-Length field is repeated with one value (``Content-Length: 6`` and
``content-length: 6``: rclone's presigned uploads, ``--s3-use-presigned-request``, the default
of rclone before 1.59, send it so) is read with that one value, as RFC 9112 section 6.3 allows
and S3 does; aiohttp would answer ``400 Duplicate Content-Length``. Repeated values that differ
stay refused. The lines are merged in a head that arrives whole in one read, at the start of a
message (the previous message's body complete): how a client that waits for each answer sends
its requests.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp.http_parser import HttpRequestParser, RawRequestMessage
from aiohttp.streams import StreamReader

_LENGTH = re.compile(rb"^content-length:[ \t]*([^\r\n]*?)[ \t]*\r?\n", re.I | re.M)


def merge_lengths(head: bytes) -> bytes | None:
    """``head`` (a request's bytes up to its blank line) keeping only the first of several
    Content-Length lines of one value; None if it has not several, or they differ."""
    if head.lower().count(b"\ncontent-length:") < 2:  # the common head: no regex run
        return None
    found = list(_LENGTH.finditer(head))
    if len(found) < 2 or len({m.group(1) for m in found}) != 1:
        return None
    out = bytearray(head)
    for m in reversed(found[1:]):
        del out[m.start():m.end()]
    return bytes(out)


class RequestParser(HttpRequestParser):
    """aiohttp's request parser, merging a head's repeated Content-Length lines of one value
    (see the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: the body of the last message parsed (None: none yet)
        self._body: StreamReader | None = None

    def feed_data(self, data: bytes, *args: Any, **kwargs: Any
                  ) -> tuple[list[tuple[RawRequestMessage, StreamReader]], bool, bytes]:
        if self._body is None or self._body.is_eof():  # a message starts here
            end = data.find(b"\r\n\r\n")
            merged = merge_lengths(data[:end + 4]) if end >= 0 else None
            if merged is not None:
                data = merged + data[end + 4:]
        result = super().feed_data(data, *args, **kwargs)
        if result[0]:
            self._body = result[0][-1][1]
        return result
