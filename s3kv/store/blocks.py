"""What a read hands out: a block's bytes as one buffer."""

from __future__ import annotations

from s3kv.wire.body import Pieces, joined

#: a block's bytes as reads return them (read from the backend: a buffer of its own)
Block = bytes | memoryview
#: an empty block's bytes: nothing is read for it (an S3 empty object, a directory marker)
EMPTY = memoryview(b"")


def as_block(data: Pieces, copy: bool = False) -> Block:
    """``data`` as one buffer (pieces are joined: a copy; the tier never holds a bytearray);
    ``copy``: a copy in any case, so that what held the bytes is let go of."""
    one = joined(data)
    return bytes(one) if copy or isinstance(one, bytearray) else one
