"""The lean client's PUTs (:meth:`s3kv.wire.fastget.GetPool.send`) against a scripted server:
a body of several views arrives whole, also one far larger than the socket buffers (the
writer waits for the transport to drain), and a server that refuses before reading the body
gets its answer through without the client hanging. (S3 behaviour: tests against moto and RGW
through ``s3kv bench`` and the gateway benchmarks.)"""

from __future__ import annotations

import asyncio
import hashlib
import os

from s3kv.wire.fastget import GetPool

REFUSAL = b"<Error><Code>AccessDenied</Code><Message>no</Message></Error>"


#: request heads the server could not parse (a connection reused after a body cut short)
GARBLED: list[bytes] = []


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
        target = head.split(b" ")[1]
        if target.startswith(b"/b/refused"):  # answer at once, never read the body
            close = target == b"/b/refused-close"
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n%s\r\n"
                         % (len(REFUSAL), b"Connection: close\r\n" if close else b"")
                         + REFUSAL)
            await writer.drain()
            if not close:  # the connection stays open, the unread body in its way: whatever
                tail = b""  # the client sends on it next must not be a new request
                while chunk := await reader.read(1 << 16):
                    if b"PUT /b/" in tail + chunk:
                        GARBLED.append(b"a request sent behind a body cut short")
                        break
                    tail = chunk[-16:]
            writer.close()
            return
        left, digest = int(fields[b"Content-Length"]), hashlib.sha256()
        while left:
            chunk = await reader.read(min(left, 1 << 16))
            left -= len(chunk)
            digest.update(chunk)
            if target == b"/b/slow":
                await asyncio.sleep(0.001)  # a slow reader: the client's transport fills up
        answer = digest.hexdigest().encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(answer) + answer)
        await writer.drain()


async def _exercise() -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    endpoint = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    pool = GetPool()
    got: list[bytes] = []

    def got_it(view: memoryview) -> None:
        got.append(bytes(view))

    try:
        for target, sizes in (("/b/small", [100, 70_000, 3]), ("/b/slow", [4 << 20] * 6)):
            views = [memoryview(os.urandom(n)) for n in sizes]
            got.clear()
            r = await pool.send("PUT", endpoint, target,
                                {"host": "x", "Content-Length": str(sum(sizes))}, views,
                                got_it)
            assert r.status == 200
            assert b"".join(got).decode() == hashlib.sha256(b"".join(views)).hexdigest()
        body = [memoryview(bytes(1 << 20))] * 8
        for target in ("/b/refused-close", "/b/refused"):
            r = await asyncio.wait_for(pool.send(
                "PUT", endpoint, target, {"host": "x", "Content-Length": str(8 << 20)}, body,
                lambda v: None, frozenset()), timeout=30)
            assert r.status == 403 and r.error_body == REFUSAL, target
        # the refused body was cut short: its connection is not reused for the next request
        got.clear()
        r = await asyncio.wait_for(pool.send(
            "PUT", endpoint, "/b/small", {"host": "x", "Content-Length": "5"}, [b"hello"],
            got_it), timeout=30)
        assert r.status == 200 and b"".join(got) == hashlib.sha256(b"hello").hexdigest().encode()
        assert not GARBLED
    finally:
        pool.close()
        server.close()
        await server.wait_closed()


def test_put_bodies_arrive_whole_and_an_early_refusal_is_answered() -> None:
    asyncio.run(_exercise())
