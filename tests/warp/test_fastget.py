"""The GET path's HTTP handling against a scripted server: keep-alive, a stale connection,
a chunked error body. (The S3 behaviour is tested against the real server elsewhere.)"""

from __future__ import annotations

import asyncio

from s3kv.wire.fastget import GetPool

BODY = b"0123456789" * 1000


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    served = 0
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        target = head.split(b" ")[1]
        if served == 1 and target == b"/b/stale":
            writer.close()  # an idle connection the server drops as the request arrives
            return
        if target == b"/b/missing":
            xml = b"<Error><Code>NoSuchKey</Code><Message>gone</Message></Error>"
            writer.write(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + f"{len(xml):x}\r\n".encode() + xml + b"\r\n0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
        await writer.drain()
        served += 1


async def _exercise() -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    pool = GetPool()
    got: list[bytes] = []
    try:
        r1 = await pool.get(endpoint, "/b/k1", {"host": f"127.0.0.1:{port}"},
                            lambda v: got.append(bytes(v)))
        assert r1.status == 200 and r1.size == len(BODY) and b"".join(got) == BODY
        got.clear()
        r2 = await pool.get(endpoint, "/b/stale", {"host": "x"}, lambda v: got.append(bytes(v)))
        assert r2.status == 200 and b"".join(got) == BODY  # retried on a fresh connection
        r3 = await pool.get(endpoint, "/b/missing", {"host": "x"}, lambda v: None)
        assert r3.status == 404 and r3.error_body.startswith(b"<Error><Code>NoSuchKey</Code>")
        assert r3.keep_alive
    finally:
        pool.close()
        server.close()
        await server.wait_closed()


def test_keep_alive_stale_connection_and_chunked_error() -> None:
    asyncio.run(_exercise())
