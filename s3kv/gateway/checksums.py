"""The checksums S3 clients send: MD5, SHA-1, SHA-256, CRC32, CRC32C, CRC64/NVME.

Each is an incremental object with ``update(bytes)`` and ``digest() -> bytes`` (big-endian for
the CRCs, as S3 base64-encodes them). MD5/SHA come from hashlib and CRC32 from zlib-ng (C, and they
release the GIL on large inputs). CRC32C and CRC64/NVME come from ``awscrt`` when it is installed
(hardware accelerated, the same code botocore uses); otherwise from a numpy implementation that
runs many lanes of a table-driven CRC in parallel and folds them together with the CRC's
linearity (shift-by-n-zero-bytes operators), roughly 100-300 MB/s on one core: enough for the
rare client that picks these algorithms, and no native dependency.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from zlib_ng import zlib_ng

try:  # pragma: no cover - depends on the environment
    from awscrt import checksums as _crt  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover
    _crt = None


class Checksum(Protocol):
    def update(self, data: bytes | memoryview) -> None: ...
    def digest(self) -> bytes: ...


class _Crc32:
    def __init__(self) -> None:
        self._crc = 0

    def update(self, data: bytes | memoryview) -> None:
        self._crc = zlib_ng.crc32(data, self._crc)  # zlib's CRC-32, ~3x faster

    def digest(self) -> bytes:
        return self._crc.to_bytes(4, "big")


class LandedCrc(_Crc32):
    """The store's CRC-32 of a body that lands in its segment (gateway/takeover.py): fed its
    pieces as they land, or settled by the receive off the event loop that worked it out as
    the bytes came (takeover.Sums, one block of ``length`` bytes)."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self.lengths = [length]

    def feed(self, piece: memoryview) -> None:
        self.update(piece)

    def settle(self, crcs: list[int]) -> None:
        [self._crc] = crcs


# -- numpy reflected CRC ------------------------------------------------------------------------

class _CrcModel:
    """A reflected CRC (init = xorout = all ones) computed on raw registers."""

    def __init__(self, poly_reflected: int, width: int) -> None:
        self.width = width
        self.mask = (1 << width) - 1
        self.dtype: type[np.unsignedinteger[Any]] = np.uint32 if width == 32 else np.uint64
        table = []
        for i in range(256):
            r = i
            for _ in range(8):
                r = (r >> 1) ^ poly_reflected if r & 1 else r >> 1
            table.append(r)
        self.table_list = table
        self.table = np.array(table, dtype=self.dtype)
        # one zero byte as a linear operator: column j = raw(1 << j, b"\0")
        self._zero1 = tuple(self._raw_scalar(1 << j, b"\0") for j in range(width))

    def _raw_scalar(self, reg: int, data: bytes) -> int:
        t = self.table_list
        for b in data:
            reg = t[(reg ^ b) & 0xFF] ^ (reg >> 8)
        return reg

    @staticmethod
    def _apply(cols: tuple[int, ...], x: int) -> int:
        out = 0
        j = 0
        while x:
            if x & 1:
                out ^= cols[j]
            x >>= 1
            j += 1
        return out

    def _compose(self, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        """The operator 'b then a'."""
        return tuple(self._apply(a, c) for c in b)

    @lru_cache(maxsize=64)  # noqa: B019 - two long-lived instances
    def shift_op(self, nbytes: int) -> tuple[int, ...]:
        """Columns of the operator that feeds ``nbytes`` zero bytes into a raw register."""
        result = tuple(1 << j for j in range(self.width))
        power = self._zero1
        n = nbytes
        while n:
            if n & 1:
                result = self._compose(power, result)
            n >>= 1
            if n:
                power = self._compose(power, power)
        return result

    @lru_cache(maxsize=64)  # noqa: B019
    def shift_tables(self, nbytes: int) -> list[npt.NDArray[Any]]:
        """Per-byte lookup tables of shift_op(nbytes), for applying it to numpy arrays."""
        cols = self.shift_op(nbytes)
        tables = []
        for k in range(self.width // 8):
            tables.append(np.array([self._apply(cols, v << (8 * k)) for v in range(256)],
                                   dtype=self.dtype))
        return tables

    def _shift_array(self, x: npt.NDArray[Any], nbytes: int) -> npt.NDArray[Any]:
        tables = self.shift_tables(nbytes)
        out: npt.NDArray[Any] = tables[0][x & 0xFF]
        for k in range(1, len(tables)):
            out ^= tables[k][(x >> (8 * k)) & 0xFF]
        return out

    def update(self, reg: int, data: bytes | memoryview, lanes: int = 16384) -> int:
        n = len(data)
        m = n // lanes
        if m < 16:
            return self._raw_scalar(reg, bytes(data))
        body = lanes * m
        arr = np.frombuffer(data, dtype=np.uint8, count=body).reshape(lanes, m)
        cols = np.ascontiguousarray(arr.T).astype(self.dtype)
        r = np.zeros(lanes, dtype=self.dtype)
        table = self.table
        eight = self.dtype(8)
        for j in range(m):
            r = table[(r ^ cols[j]) & 0xFF] ^ (r >> eight)
        length = m
        while len(r) > 1:  # fold pairs: raw(A||B) = shift(raw(A), |B|) ^ raw(B)
            r = self._shift_array(r[0::2], length) ^ r[1::2]
            length *= 2
        reg = self._apply(self.shift_op(body), reg) ^ int(r[0])
        return self._raw_scalar(reg, bytes(data[body:]))


_CRC32C = _CrcModel(0x82F63B78, 32)
_CRC64NVME = _CrcModel(0x9A6C9329AC4BC9B5, 64)


class _NumpyCrc:
    def __init__(self, model: _CrcModel) -> None:
        self._model = model
        self._reg = model.mask

    def update(self, data: bytes | memoryview) -> None:
        self._reg = self._model.update(self._reg, data)

    def digest(self) -> bytes:
        return (self._reg ^ self._model.mask).to_bytes(self._model.width // 8, "big")


class _CrtCrc:  # pragma: no cover - used only when awscrt is installed
    def __init__(self, fn: Callable[[Any, int], int], size: int) -> None:
        self._fn = fn
        self._size = size
        self._crc = 0

    def update(self, data: bytes | memoryview) -> None:
        self._crc = self._fn(data, self._crc)

    def digest(self) -> bytes:
        return self._crc.to_bytes(self._size, "big")


def _crc32c() -> Checksum:
    if _crt is not None:  # pragma: no cover
        return _CrtCrc(_crt.crc32c, 4)
    return _NumpyCrc(_CRC32C)


def _crc64nvme() -> Checksum:
    if _crt is not None and hasattr(_crt, "crc64nvme"):  # pragma: no cover
        return _CrtCrc(_crt.crc64nvme, 8)
    return _NumpyCrc(_CRC64NVME)


#: algorithm name as in ``x-amz-checksum-<name>`` -> (factory, digest size in bytes)
ALGORITHMS: dict[str, tuple[Callable[[], Checksum], int]] = {
    "crc32": (_Crc32, 4),
    "crc32c": (_crc32c, 4),
    "crc64nvme": (_crc64nvme, 8),
    "sha1": (hashlib.sha1, 20),
    "sha256": (hashlib.sha256, 32),
}


def new_checksum(name: str) -> Checksum:
    return ALGORITHMS[name][0]()


def digest_b64(name: str, data: bytes | memoryview) -> str:
    """The ``name`` checksum of ``data``, base64 (as in ``x-amz-checksum-<name>``); large data
    belongs in a worker thread."""
    h = new_checksum(name)
    h.update(data)
    return base64.b64encode(h.digest()).decode()


def is_cheap(checksum: object) -> bool:
    """Whether ``checksum`` runs at memory speed (a hardware-assisted CRC: tens of GB/s here),
    so that hashing a piece on the event loop costs less than handing it to a thread."""
    return isinstance(checksum, (_Crc32, _CrtCrc))
