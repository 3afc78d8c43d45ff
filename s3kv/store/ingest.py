"""A block on its way in: checked against the limits, encoded by its codec (off the event
loop), checksummed; the entry and the bytes the segment writer appends."""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from s3kv.errors import InvalidInput, TooLarge
from s3kv.store import layout
from s3kv.store.blocksums import checksum_async
from s3kv.store.codecs import NONE_ID, CodecSpec, codec_for
from s3kv.wire.body import Pieces, joined, size_of


def check_key(key: bytes) -> None:
    if not key or len(key) > layout.MAX_KEY_BYTES:
        raise InvalidInput(f"key must be 1..{layout.MAX_KEY_BYTES} bytes, got {len(key)}")


class Prepared(NamedTuple):
    #: offset 0 and written_at 0.0: the writer places and stamps it
    entry: layout.Entry
    #: the bytes to append: the codec's output, or the data as given
    stored: Pieces


async def prepare(namespace: str, key: bytes, data: Pieces, spec: CodecSpec, *,
                  max_block_size: int, attrs: bytes = b"", crc: int | None = None) -> Prepared:
    """Raises InvalidInput (key, attributes, or a block that does not fit the codec's declared
    shape) or TooLarge. ``crc``: the data's ``layout.checksum`` if the caller computed it as
    the bytes arrived (used only when the block is stored as it is, with no codec)."""
    check_key(key)
    raw_len = size_of(data)
    if raw_len > max_block_size:
        raise TooLarge(f"block of {raw_len} bytes is over max_block_size ({max_block_size})")
    if len(attrs) > layout.MAX_ATTRS_BYTES:
        raise InvalidInput(f"block attributes of {len(attrs)} bytes are over "
                           f"{layout.MAX_ATTRS_BYTES}")
    codec_id = NONE_ID
    stored: Pieces = data
    if spec.name != "none":
        impl = codec_for(spec)
        stored = await asyncio.to_thread(impl.encode, memoryview(joined(data)))
        codec_id = impl.codec_id
        crc = None
    if crc is None:
        crc = await checksum_async(stored)
    entry = layout.Entry(namespace, key, 0, size_of(stored), raw_len, crc, codec_id, 0.0,
                         attrs=attrs)
    return Prepared(entry, stored)
