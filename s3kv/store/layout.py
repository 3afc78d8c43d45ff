"""The segment object format (see docs/format.md): blocks, footer manifest, fixed trailer.

    segment := block* gap* manifest trailer
    - blocks start at multiples of block_align; alignment gaps are zero bytes;
    - a full segment ends exactly at segment_size (the tail gap before the manifest is zeros);
    - the manifest (also written alone as the sidecar object) lists every block;
    - the trailer (32 bytes) locates and checksums the manifest.

All integers little-endian. Checksums are CRC-32 (zlib polynomial).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from zlib_ng import zlib_ng

from s3kv.errors import IntegrityError

#: version 2 adds per-entry attributes (opaque bytes after the key: the S3 front's ETag,
#: content headers, user metadata, checksum, part sizes); version 1 segments still read
FORMAT_VERSION = 2
READABLE_VERSIONS = frozenset({1, 2})
MANIFEST_MAGIC = b"S3KVMNF1"
TRAILER_MAGIC = b"S3KVSEG1"

# magic, version, flags, entry count, namespace count, segment length, created_at, name length
_MANIFEST_HEAD = struct.Struct("<8sHHIHQdH")
# ns index, key length, codec, flags, attrs length (v1: zero padding), offset, stored length,
# raw length, crc32, written_at
_ENTRY = struct.Struct("<HHBBHQIIId")
_NS = struct.Struct("<H")
# magic, version, flags, manifest length, manifest offset, manifest crc, trailer crc
TRAILER = struct.Struct("<8sHHIQII")
TRAILER_SIZE = TRAILER.size  # 32

FLAG_TOMBSTONE = 0x01
#: blocks end below this offset in a segment (the index keeps offsets in 32 bits)
MAX_OFFSET = 1 << 32
#: stamps (Unix seconds) are below the year 10000: an HTTP date and ISO 8601 hold them
MAX_STAMP = 253402300800.0

MAX_KEY_BYTES = 1024
#: an entry's attributes fit its u16 length field
MAX_ATTRS_BYTES = 0xFFFF
ENTRY_FIXED_BYTES = _ENTRY.size


def align_up(n: int, align: int) -> int:
    return (n + align - 1) & ~(align - 1)


def checksum(data: bytes | bytearray | memoryview) -> int:
    """CRC-32 (zlib's polynomial). zlib-ng computes the same values as zlib.crc32 with
    carry-less multiplication, ~9 GB/s here against the system zlib's ~3 (docs/performance-log.md):
    every block is checksummed on every put and every read."""
    return zlib_ng.crc32(data) & 0xFFFFFFFF


def checksum_more(crc: int, data: bytes | bytearray | memoryview) -> int:
    """:func:`checksum` of what ``crc`` was the checksum of, followed by ``data``."""
    return zlib_ng.crc32(data, crc) & 0xFFFFFFFF


def checksum_pieces(pieces: Sequence[bytes | bytearray | memoryview]) -> int:
    """:func:`checksum` of the pieces' concatenation, without joining them."""
    crc = 0
    for piece in pieces:
        crc = checksum_more(crc, piece)
    return crc


class Entry(NamedTuple):
    """One manifest line: a block (or a tombstone for a deleted key)."""

    namespace: str
    key: bytes
    offset: int
    length: int
    raw_length: int
    crc: int
    codec: int
    written_at: float
    flags: int = 0
    #: opaque attributes the store keeps with the block (format version 2); b"" for none
    attrs: bytes = b""

    @property
    def tombstone(self) -> bool:
        return bool(self.flags & FLAG_TOMBSTONE)


def tombstone_for(namespace: str, key: bytes, written_at: float = 0.0) -> Entry:
    """A tombstone of ``key`` stamped ``written_at`` (0: stamped when it is appended)."""
    return Entry(namespace, key, 0, 0, 0, 0, 0, written_at, FLAG_TOMBSTONE)


def keep_newest(entries: Iterable[Entry], into: dict[tuple[str, bytes], Entry]) -> None:
    """Into ``into``, by (namespace, key), the newest of ``entries`` and of what it holds:
    the one entry of each key that last writer wins leaves standing."""
    for e in entries:
        seen = into.get((e.namespace, e.key))
        if seen is None or seen.written_at < e.written_at:
            into[e.namespace, e.key] = e


@dataclass
class Manifest:
    segment: str  # the segment's name relative to the store prefix
    created_at: float
    segment_length: int = 0
    entries: list[Entry] = field(default_factory=list)

    def encode(self, version: int = FORMAT_VERSION) -> bytes:
        """The manifest's bytes; ``version=1`` writes the old format (tests of old segments:
        it has no room for attributes, so entries must carry none)."""
        namespaces: dict[str, int] = {}
        for e in self.entries:
            namespaces.setdefault(e.namespace, len(namespaces))
        name = self.segment.encode()
        out = bytearray(_MANIFEST_HEAD.pack(
            MANIFEST_MAGIC, version, 0, len(self.entries), len(namespaces),
            self.segment_length, self.created_at, len(name)))
        out += name
        for ns in namespaces:
            raw = ns.encode()
            out += _NS.pack(len(raw)) + raw
        for e in self.entries:
            if len(e.attrs) > MAX_ATTRS_BYTES or (e.attrs and version < 2):
                raise ValueError(f"entry attributes of {len(e.attrs)} bytes do not fit "
                                 f"format version {version}")
            out += _ENTRY.pack(namespaces[e.namespace], len(e.key), e.codec, e.flags,
                               len(e.attrs), e.offset, e.length, e.raw_length, e.crc,
                               e.written_at)
            out += e.key
            out += e.attrs
        out += struct.pack("<I", checksum(out))
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        if len(data) < _MANIFEST_HEAD.size + 4:
            raise IntegrityError("manifest too short")
        body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
        if checksum(body) != crc:
            raise IntegrityError("manifest checksum mismatch")
        try:
            magic, version, _flags, n_entries, n_ns, seg_len, created, name_len = \
                _MANIFEST_HEAD.unpack_from(body, 0)
            if magic != MANIFEST_MAGIC:
                raise IntegrityError("not an s3kv manifest (bad magic)")
            if version not in READABLE_VERSIONS:
                raise IntegrityError(f"unsupported manifest version {version}")
            pos = _MANIFEST_HEAD.size
            name = body[pos:pos + name_len].decode()
            pos += name_len
            ns_names: list[str] = []
            for _ in range(n_ns):
                (n,) = _NS.unpack_from(body, pos)
                pos += _NS.size
                ns_names.append(body[pos:pos + n].decode())
                pos += n
            entries: list[Entry] = []
            unpack = _ENTRY.unpack_from
            for _ in range(n_entries):
                ns_i, klen, codec, flags, alen, off, length, raw_len, bcrc, wat = unpack(body,
                                                                                         pos)
                pos += _ENTRY.size
                key = body[pos:pos + klen]
                pos += klen
                if version < 2 and alen:
                    raise IntegrityError("a version 1 manifest entry has non-zero padding")
                attrs = body[pos:pos + alen]
                pos += alen
                entries.append(Entry(ns_names[ns_i], key, off, length, raw_len, bcrc, codec,
                                     wat, flags, attrs))
        except (struct.error, IndexError, UnicodeDecodeError) as exc:
            raise IntegrityError(f"malformed manifest: {exc}") from exc
        if pos != len(body):
            raise IntegrityError("manifest has trailing bytes")
        return cls(name, created, seg_len, entries)


def check_manifest(manifest: Manifest, name: str, size: int, length: int) -> None:
    """IntegrityError unless ``manifest`` (``length`` bytes encoded) describes the listed
    segment object ``name`` of ``size`` bytes as the store writes one: its name and length,
    every block within the bytes before the manifest (and within the index's 32-bit offsets),
    a block stored as is (codec 0) as long as its raw length, stamps from 1970 to 9999. A
    manifest whose checksums match but whose fields do not (another tool's, a copy under
    another name, a truncated or extended object) would otherwise index blocks that read past
    the object, read another segment's bytes, answer with a length their bytes do not have,
    or with a date no HTTP header holds."""
    if manifest.segment != name:
        raise IntegrityError(f"manifest names the segment {manifest.segment[:100]!r}")
    if manifest.segment_length != size:
        raise IntegrityError(f"manifest says the segment is {manifest.segment_length} bytes, "
                             f"the object is {size}")
    end = min(size - TRAILER_SIZE - length, MAX_OFFSET)
    if not 0.0 <= manifest.created_at < MAX_STAMP:
        raise IntegrityError(f"manifest sealed at {manifest.created_at}")
    for e in manifest.entries:
        if not 0.0 <= e.written_at < MAX_STAMP:  # NaN too
            raise IntegrityError(f"an entry stamped {e.written_at}")
        if e.tombstone:
            continue
        if e.offset + e.length > end:
            raise IntegrityError(f"a block at {e.offset} of {e.length} bytes is past the "
                                 f"segment's blocks ({end} bytes)")
        if e.codec == 0 and e.raw_length != e.length:
            raise IntegrityError(f"a block stored as is of {e.length} bytes says "
                                 f"{e.raw_length}")


def manifest_overhead(segment: str) -> int:
    """Bytes of an empty manifest for this segment name (header, name, final crc)."""
    return _MANIFEST_HEAD.size + len(segment.encode()) + 4


def entry_bytes(namespace_new: str | None, key: bytes, attrs: int = 0) -> int:
    """Bytes one more entry adds to a manifest (plus its namespace if not yet listed);
    ``attrs``: the length of its attributes."""
    extra = _NS.size + len(namespace_new.encode()) if namespace_new is not None else 0
    return _ENTRY.size + len(key) + attrs + extra


def encode_trailer(manifest_offset: int, manifest: bytes,
                   version: int = FORMAT_VERSION) -> bytes:
    head = TRAILER.pack(TRAILER_MAGIC, version, 0, len(manifest), manifest_offset,
                        checksum(manifest), 0)
    crc = checksum(head[:-4])
    return head[:-4] + struct.pack("<I", crc)


def decode_trailer(data: bytes | bytearray) -> tuple[int, int, int]:
    """Parse a trailer; returns (manifest offset, manifest length, manifest crc)."""
    if len(data) != TRAILER_SIZE:
        raise IntegrityError("trailer has the wrong size")
    magic, version, _flags, mlen, moff, mcrc, tcrc = TRAILER.unpack(data)
    if magic != TRAILER_MAGIC:
        raise IntegrityError("not an s3kv segment (bad trailer magic)")
    if version not in READABLE_VERSIONS:
        raise IntegrityError(f"unsupported segment format version {version}")
    if checksum(data[:-4]) != tcrc:
        raise IntegrityError("trailer checksum mismatch")
    return moff, mlen, mcrc
