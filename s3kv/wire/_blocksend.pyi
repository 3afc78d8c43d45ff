from collections.abc import Sequence

DONE: int
BAD: int
FULL: int
FAILED: int

def send(fd: int, heads: Sequence[bytes], views: Sequence[memoryview], crcs: Sequence[int],
         tail: bytes, crc_fn: int) -> tuple[int, int, int, int]: ...
