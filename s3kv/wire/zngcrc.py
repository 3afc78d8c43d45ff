"""The address of zlib-ng's CRC-32, for the compiled socket loops (``_landrecv.c``,
``_blocksend.c``) that call it with the GIL released."""

from __future__ import annotations

import ctypes

import zlib_ng.zlib_ng


def crc_address() -> int:
    """The address of zlib-ng's ``zng_crc32`` in the zlib_ng package's extension (loaded
    already: dlopen hands back the same library): the same CRC-32 as ``layout.checksum``.
    Raises OSError or AttributeError if it is not exported."""
    lib = ctypes.CDLL(zlib_ng.zlib_ng.__file__)
    address = ctypes.cast(lib.zng_crc32, ctypes.c_void_p).value
    if not address:
        raise OSError("zlib_ng exports no zng_crc32")
    return address
