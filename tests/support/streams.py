"""Batch-get streams as a gateway would send them, for the client's stream tests."""

from __future__ import annotations

from s3kv.frames import block_record, end_record


def records(blocks: list[tuple[str, bytes | None]]) -> bytes:
    """The record stream answering ``blocks`` (key, bytes or None for a miss), end record
    included."""
    out = bytearray()
    for key, data in blocks:
        out += block_record(key, None if data is None else len(data)) + (data or b"")
    return bytes(out + end_record(len(blocks)))


def chunked(payload: bytes, sizes: list[int], trailer: bytes = b"") -> bytes:
    """``payload`` as a chunked HTTP body of chunks of ``sizes`` (then the last chunk)."""
    out, pos = bytearray(), 0
    for size in sizes:
        out += b"%x\r\n" % size + payload[pos:pos + size] + b"\r\n"
        pos += size
    return bytes(out + b"0\r\n" + trailer + b"\r\n")
