"""The ``kvq`` block format (docs/codecs.md): header, flags, segments and their layouts,
shared by the encoder (kvq.py) and the decoder (kvq_decode.py)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

CODEC_ID = 2
MAGIC = b"S3KQ"
#: 2: channel order as uint8 when head_dim <= 256, codebooks as float16 (1 had uint16 and
#: float32; no version-1 data was ever deployed, so only version 2 decodes)
VERSION = 2
HEADER = struct.Struct("<4sBBHBBBBIQQQII")  # 48 bytes; the last field is the header crc32
DTYPES = {"float16": 1, "bfloat16": 2}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
FLAG_PERMUTED = 1
MAX_ROTATION = 64
#: gains are coded in ln units over at most this range below the block's largest gain
GAIN_RANGE = 12.0
#: largest |value| kvq accepts: squares of 128+ such values still fit float32
MAX_ABS = 2.0**60


def perm_dtype(d: int) -> str:
    """The channel order is stored in one byte per channel when head_dim allows."""
    return "u1" if d <= 256 else "<u2"

#: candidate layouts per effective bit width: (quarters of head_dim, bits) per segment, the
#: first segment holding the highest-energy channels. All candidates spend exactly the same
#: index bits; the encoder picks the one with the least expected error for the block.
LAYOUTS: dict[float, tuple[tuple[tuple[int, int], ...], ...]] = {
    2.0: (((4, 2),), ((2, 3), (2, 1))),
    2.5: (((1, 4), (3, 2)), ((2, 3), (2, 2))),
    3.0: (((4, 3),), ((2, 4), (2, 2)), ((1, 5), (1, 3), (2, 2))),
    3.5: (((1, 5), (3, 3)), ((2, 4), (2, 3))),
    4.0: (((4, 4),), ((2, 5), (2, 3))),
}


@dataclass(frozen=True)
class Segment:
    channels: int
    bits: int

    @property
    def blocks(self) -> int:
        """Rotation blocks: the fewest of equal size <= 64 that is a multiple of 8.
        ValueError for a segment of no such blocks (channels not a positive multiple of 8):
        the search would never end."""
        if self.channels <= 0 or self.channels % 8:
            raise ValueError(f"a segment of {self.channels} channels")
        m = -(-self.channels // MAX_ROTATION)
        while self.channels % (8 * m):
            m += 1
        return m

    @property
    def block_size(self) -> int:
        return self.channels // self.blocks
