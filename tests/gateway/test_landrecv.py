"""The compiled receive loop of s3kv/wire/landrecv.py over a real socket pair: bytes land in
the windows from where the caller says, each block's CRC-32 is layout.checksum's, and it
returns at the peer's end, when told to stop, and past its budget, with what it received.
(tests/gateway/test_batch_landing.py drives it through a gateway.)"""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
import threading
import time

import pytest

from s3kv.store import layout
from s3kv.wire import landrecv
from s3kv.wire.landrecv import Receiver

pytestmark = pytest.mark.skipif(landrecv.receiver() is None,
                                reason="the compiled receive did not build (no C compiler)")


def _send_later(sock: socket.socket, data: bytes, delay: float = 0.05) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        sock.sendall(data)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


async def test_blocks_land_across_windows_each_with_its_crc(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    lengths = [300_000, 0, 1 << 20, 5, 777_777]  # an empty block, blocks across the windows
    data = os.urandom(sum(lengths))
    buf = memoryview(bytearray(len(data)))
    spans = [buf[:100_000], buf[100_000:1_500_000], buf[1_500_000:]]
    buf[:1000] = data[:1000]  # in before the call: summed, not received
    sender = _send_later(theirs, data[1000:])
    _, done = Receiver(2).start(ours.fileno(), spans, 1000, lengths)
    got = await done
    sender.join()
    assert (got.n, got.whole, got.ended, got.error) == (len(data) - 1000, True, False, 0)
    assert bytes(buf) == data
    at, want = 0, []
    for n in lengths:
        want.append(layout.checksum(data[at:at + n]))
        at += n
    assert got.crcs == want


async def test_it_returns_at_the_peers_end_when_stopped_and_past_its_budget(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    receiver = Receiver(2, budget=0.3)
    window = memoryview(bytearray(100))
    theirs.sendall(b"x" * 10)
    started = time.monotonic()
    _, done = receiver.start(ours.fileno(), [window], 0, [100])
    got = await done  # nothing more comes: handed back once the budget is spent
    assert 0.25 < time.monotonic() - started < 5
    assert (got.n, got.whole, got.ended, got.crcs) == (10, False, False, [])

    patient = Receiver(1, budget=30)  # told to stop, it returns long before its budget
    receiving, done = patient.start(ours.fileno(), [window], 10, [100])
    await asyncio.sleep(0.05)
    receiving.cancel()
    started = time.monotonic()
    got = await done
    assert time.monotonic() - started < 5 and (got.n, got.whole) == (0, False)
    patient.close()

    theirs.sendall(b"y" * 20)
    theirs.shutdown(socket.SHUT_WR)
    _, done = receiver.start(ours.fileno(), [window], 10, [100])
    got = await done
    assert (got.n, got.whole, got.ended) == (20, False, True)
    assert bytes(window[:30]) == b"x" * 10 + b"y" * 20
    receiver.close()


async def test_a_worker_per_body_and_lengths_that_do_not_add_up_refused(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, _ = pair
    receiver = Receiver(1)
    window = memoryview(bytearray(64))
    with pytest.raises(ValueError):
        receiver.start(ours.fileno(), [window], 0, [32])
    with pytest.raises(ValueError):
        receiver.start(ours.fileno(), [window], 65, [64])
    assert receiver.can_start()
    receiving, done = receiver.start(ours.fileno(), [window], 0, [64])
    assert not receiver.can_start()  # the only worker is busy: the event loop receives
    receiving.cancel()
    await done
    assert receiver.can_start()
    receiver.close()
    assert not receiver.can_start()  # closed: the event loop receives every body
    with pytest.raises(OSError):
        receiver.start(ours.fileno(), [window], 0, [64])
    compiled = importlib.import_module("s3kv.wire._landrecv")
    with pytest.raises(BufferError):  # a read-only window is refused before any read
        compiled.receive(ours.fileno(), [memoryview(b"0" * 8)], 0, [8], 1, 8, bytearray(1), 0)
    with pytest.raises(ValueError):  # as are lengths that do not add up to the windows
        compiled.receive(ours.fileno(), [window], 0, [8], 1, 8, bytearray(1), 0)
