from collections.abc import Sequence

DONE: int
ENDED: int
STOPPED: int
SLOW: int
FAILED: int

def receive(fd: int, spans: Sequence[memoryview], filled: int, lengths: Sequence[int],
            crc_fn: int, max_read: int, stop: bytearray, budget_ms: int
            ) -> tuple[int, int, int, list[int]]: ...
