"""The compiled check-and-send loop of s3kv/wire/blocksend.py over a real socket pair: each
block goes out after its head and before the tail only if its CRC-32 is the one it was stored
with; it stops before a block that fails (nothing of it sent), returns at once with how far it
got when the socket takes no more, and reports a peer that is gone.
(tests/gateway/test_batch_get_checked.py drives it through a gateway.)"""

from __future__ import annotations

import errno
import importlib
import os
import socket
import threading
import time

import pytest

from s3kv.store import layout
from s3kv.wire import blocksend
from s3kv.wire.blocksend import Sender

pytestmark = pytest.mark.skipif(blocksend.sender() is None,
                                reason="the compiled send did not build (no C compiler)")

TAIL = b"\r\n"


def _read(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            break
        out += got
    return bytes(out)


def _reading(sock: socket.socket, n: int) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []
    thread = threading.Thread(target=lambda: got.append(_read(sock, n)))
    thread.start()
    return thread, got


def _wire(heads: list[bytes], blocks: list[bytes]) -> bytes:
    return b"".join(h + b + TAIL for h, b in zip(heads, blocks, strict=True))


def test_blocks_go_out_checked_in_order_and_a_bad_one_stops_the_run(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    blocks = [os.urandom(n) for n in (300_000, 0, 5, 1 << 20, 77_777)]
    heads = [b"head%d:" % i for i in range(len(blocks))]
    crcs = [layout.checksum(b) for b in blocks]
    crcs[3] ^= 1  # the fourth block is not what was stored
    views = [memoryview(b) for b in blocks]
    sender = Sender()
    expect = _wire(heads[:3], blocks[:3])
    reader, got = _reading(theirs, len(expect))
    sent, at = sender.send(ours.fileno(), heads, views, crcs, TAIL), 0
    while not sent.bad and sent.blocks < 3:  # the socket took no more: go on when it does
        time.sleep(0.01)
        at += sent.blocks
        rest = _wire(heads[at:at + 1], blocks[at:at + 1])[sent.partial:]
        ours.setblocking(True)
        ours.sendall(rest)
        ours.setblocking(False)
        at += 1
        sent = sender.send(ours.fileno(), heads[at:], views[at:], crcs[at:], TAIL)
    reader.join()
    assert (at + sent.blocks, sent.partial, sent.bad, sent.error) == (3, 0, True, 0)
    assert got == [expect]
    theirs.setblocking(False)
    with pytest.raises(BlockingIOError):  # nothing of the bad block went out
        theirs.recv(1)
    theirs.setblocking(True)

    reader, got = _reading(theirs, len(_wire(heads[4:], blocks[4:])))
    sent = sender.send(ours.fileno(), heads[4:], views[4:], crcs[4:], TAIL)
    reader.join()
    assert (sent.blocks, sent.bad, sent.error) == (1, False, 0)
    assert got == [_wire(heads[4:], blocks[4:])]


def test_a_socket_that_takes_no_more_returns_at_once_with_how_far_it_got(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    block = os.urandom(64 << 20)  # more than the socket pair holds
    sender = Sender()
    started = time.monotonic()
    sent = sender.send(ours.fileno(), [b"h", b"i"], [memoryview(block), memoryview(block)],
                       [layout.checksum(block)] * 2, TAIL)
    assert time.monotonic() - started < 5  # no wait for the reader
    assert (sent.blocks, sent.bad, sent.error) == (0, False, 0)
    assert 0 < sent.partial < len(block)  # what went out: the caller sends the rest
    assert _read(theirs, sent.partial) == (b"h" + block)[:sent.partial]


def test_a_peer_gone_is_an_error_and_bad_calls_are_refused(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    theirs.close()
    sender = Sender()
    block = os.urandom(1 << 20)
    sent = sender.send(ours.fileno(), [b"h"], [memoryview(block)], [layout.checksum(block)],
                       TAIL)
    assert sent.blocks == 0 and sent.error in (errno.EPIPE, errno.ECONNRESET)
    compiled = importlib.import_module("s3kv.wire._blocksend")
    with pytest.raises(ValueError):  # a CRC that is no CRC-32, before anything is sent
        compiled.send(ours.fileno(), [b"h"], [memoryview(block)], [1 << 40], TAIL, 1)
    with pytest.raises(ValueError):  # as many heads and CRCs as blocks
        compiled.send(ours.fileno(), [b"h", b"i"], [memoryview(block)], [0], TAIL, 1)
