"""The GET path's HTTP handling against a scripted server: keep-alive, a stale connection,
a chunked error body. (The S3 behaviour is tested against the real server elsewhere.)"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from pathlib import Path

import pytest

from s3kv.wire.fastget import ERROR_BODY_LIMIT, RCV_LOWAT, GetPool, ProtocolError, landing_of

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


class _InPlace:
    """A sink that takes the body into its own buffer in place where it can."""

    def __init__(self, size: int, in_place_for: int | None = None) -> None:
        self.buf = bytearray(size)
        self.pos = 0
        self.landed_bytes = 0
        self.fed_bytes = 0
        self.landings = 0  # receives straight into the buffer (each one a wake of the loop)
        self.in_place_for = size if in_place_for is None else in_place_for

    def __call__(self, view: memoryview) -> None:
        self.buf[self.pos:self.pos + len(view)] = view
        self.pos += len(view)
        self.fed_bytes += len(view)

    def space(self) -> memoryview | None:
        return memoryview(self.buf)[self.pos:self.in_place_for] \
            if self.pos < self.in_place_for else None

    def landed(self, n: int) -> None:
        self.pos += n
        self.landed_bytes += n
        self.landings += 1


async def _serve_slowly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The head, then the body in pieces with pauses (so that it is read after the head)."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        if head.split(b" ")[1] == b"/b/missing":
            xml = b"<Error><Code>NoSuchKey</Code></Error>" + b" " * 5000
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n" % len(xml))
            await writer.drain()
            await asyncio.sleep(0.02)
            writer.write(xml)
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY))
            for at in range(0, len(BODY), 3000):
                await writer.drain()
                await asyncio.sleep(0.01)
                writer.write(BODY[at:at + 3000])
        await writer.drain()


def test_a_landing_sink_receives_the_body_in_place_and_never_an_error_body() -> None:
    async def go() -> None:
        server = await asyncio.start_server(_serve_slowly, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = GetPool()
        try:
            sink = _InPlace(len(BODY))
            r = await pool.get(f"http://127.0.0.1:{port}", "/b/k", {"host": "x"}, sink)
            assert r.status == 200 and r.size == len(BODY) and bytes(sink.buf) == BODY
            assert sink.landed_bytes > 0  # received straight into the sink's memory
            assert sink.landed_bytes + sink.fed_bytes == len(BODY)
            err = _InPlace(len(BODY))
            r = await pool.get(f"http://127.0.0.1:{port}", "/b/missing", {"host": "x"}, err)
            assert r.status == 404 and err.landed_bytes == err.fed_bytes == 0
        finally:
            pool.close()
            server.close()
            await server.wait_closed()

    asyncio.run(go())


def test_landing_of_tells_in_place_sinks_from_plain_callables_per_class() -> None:
    sink = _InPlace(4)
    assert landing_of(sink) is sink
    assert landing_of(lambda view: None) is None

    class CallOnly:  # a __call__ but no space/landed: bytes come through __call__
        def __call__(self, view: memoryview) -> None:
            pass

    assert landing_of(CallOnly()) is None


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


#: an error's body whose first chunk's data ends in what looks like the end of a chunked body
TRICKY = b"<Error><Code>SlowDown</Code>\r\n0\r\n"
TRICKY_REST = b"<Message>later</Message></Error>"
BIG_ERROR = b"<Error>" + b"x" * (100 << 10) + b"</Error>"


async def _serve_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         connections: list[int]) -> None:
    """Chunked answers, each chunk written on its own after a pause; counts connections."""
    connections.append(1)
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return
        target = head.split(b" ")[1]
        if target == b"/b/bad-chunk":  # not a chunk size
            writer.write(b"HTTP/1.1 503 Slow Down\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
            await writer.drain()
            continue
        status, pieces = {b"/b/tricky": (b"503 Slow Down", [TRICKY, TRICKY_REST]),
                          b"/b/big-error": (b"503 Slow Down", [BIG_ERROR[:70000],
                                                               BIG_ERROR[70000:]]),
                          }.get(target, (b"200 OK", [BODY[:4000], BODY[4000:]]))
        writer.write(b"HTTP/1.1 " + status + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in pieces:
            writer.write(_chunk(piece))
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def test_chunked_bodies_are_dechunked_whatever_they_go_to() -> None:
    """A chunked body is taken apart by its framing, never by what its bytes look like: an
    error's body that contains a chunked body's end is kept whole; a 200's goes to a plain
    sink (``size``: its data, framing aside); an error's body past the limit is cut, not
    refused. The connection is reused after each (one connection for all). Bad framing is a
    ProtocolError, as the S3 readers (the backend's ranged reads, warp) catch it."""
    async def go() -> None:
        connections: list[int] = []
        server = await asyncio.start_server(
            lambda r, w: _serve_chunked(r, w, connections), "127.0.0.1", 0)
        endpoint = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        pool = GetPool()
        got: list[bytes] = []
        try:
            r = await pool.get(endpoint, "/b/tricky", {"host": "x"}, got.append)
            assert r.status == 503 and r.error_body == TRICKY + TRICKY_REST and not got
            r = await pool.get(endpoint, "/b/k", {"host": "x"}, lambda v: got.append(bytes(v)))
            assert r.status == 200 and b"".join(got) == BODY and r.size == len(BODY)
            r = await pool.get(endpoint, "/b/big-error", {"host": "x"}, got.append)
            assert r.status == 503 and r.error_body == BIG_ERROR[:ERROR_BODY_LIMIT]
            got.clear()
            r = await pool.get(endpoint, "/b/k", {"host": "x"}, lambda v: got.append(bytes(v)))
            assert r.status == 200 and b"".join(got) == BODY and r.keep_alive
            assert len(connections) == 1
            with pytest.raises(ProtocolError, match="bad chunked body"):  # as S3 readers expect
                await pool.get(endpoint, "/b/bad-chunk", {"host": "x"}, got.append)
        finally:
            pool.close()
            server.close()
            await server.wait_closed()

    asyncio.run(go())


def _pattern(n: int) -> bytes:
    return bytes(range(251)) * (n // 251) + bytes(range(n % 251))


async def _dribble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``GET /SIZE/PIECE``: a body of SIZE bytes written PIECE bytes at a time, 1 ms apart
    (each piece its own arrival)."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        size, piece = (int(v) for v in head.split(b" ")[1].split(b"/")[1:3])
        body = _pattern(size)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        for at in range(0, size, piece):
            await writer.drain()
            await asyncio.sleep(0.001)
            writer.write(body[at:at + piece])
        await writer.drain()


def test_a_large_body_wakes_the_loop_per_mark_and_never_stalls_at_its_end() -> None:
    """While 2x RCV_LOWAT or more of a large body is to come (landing in place or through the
    connection's buffer), the loop is woken once that much is in, not per arrival; the mark
    comes down before the rest could fall below it, so a body ends whatever its size against
    the mark and wherever its bytes go (into the sink's memory or through its call), on one
    keep-alive connection."""
    async def go() -> None:
        server = await asyncio.start_server(_dribble, "127.0.0.1", 0)
        endpoint = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        pool = GetPool()
        piece = 64 << 10
        try:
            async with asyncio.timeout(30):  # a stall at a body's end never returns
                size = 16 * RCV_LOWAT
                sink = _InPlace(size)
                r = await pool.get(endpoint, f"/{size}/{piece}", {"host": "x"}, sink)
                assert r.status == 200 and bytes(sink.buf) == _pattern(size)
                # 256 arrivals; with the mark, ~14 wakes for the first 14 MiB, one per piece
                # of the last 2 MiB
                assert sink.landings < size // piece // 2, sink.landings
                calls: list[int] = []  # a plain sink: the body through the connection's buffer
                r = await pool.get(endpoint, f"/{size}/{piece}", {"host": "x"},
                                   lambda view: calls.append(len(view)))
                assert r.status == 200 and sum(calls) == size
                assert len(calls) < size // piece // 2, len(calls)
                for size, in_place_for in ((4 * RCV_LOWAT, None), (4 * RCV_LOWAT - 1, None),
                                           (4 * RCV_LOWAT + 12345, RCV_LOWAT),
                                           (5 * RCV_LOWAT + 3, 4 * RCV_LOWAT)):
                    sink = _InPlace(size, in_place_for)
                    r = await pool.get(endpoint, f"/{size}/{piece}", {"host": "x"}, sink)
                    assert r.status == 200 and bytes(sink.buf) == _pattern(size)
                    assert sink.landed_bytes <= (in_place_for or size)
                    assert sink.fed_bytes >= size - (in_place_for or size)
        finally:
            pool.close()
            server.close()
            await server.wait_closed()

    asyncio.run(go())


def _tls_pair(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh self-signed certificate for 127.0.0.1, and a client
    context that trusts it."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    client = ssl.create_default_context(cafile=str(tmp / "cert.pem"))
    return server, client


def test_large_bodies_over_tls_end_whole_on_one_connection(tmp_path: Path) -> None:
    """An https endpoint (a backend behind TLS): large bodies, in place or through the sink's
    call, arrive whole and end, whatever their size against the receive mark."""
    server_ctx, client_ctx = _tls_pair(tmp_path)

    async def go() -> None:
        server = await asyncio.start_server(_dribble, "127.0.0.1", 0, ssl=server_ctx)
        endpoint = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        pool = GetPool(client_ctx)
        try:
            async with asyncio.timeout(60):
                for size, piece, in_place_for in ((16 * RCV_LOWAT, 256 << 10, None),
                                                  (4 * RCV_LOWAT + 12345, 64 << 10, RCV_LOWAT),
                                                  (4 * RCV_LOWAT, 1 << 20, None)):
                    sink = _InPlace(size, in_place_for)
                    r = await pool.get(endpoint, f"/{size}/{piece}", {"host": "x"}, sink)
                    assert r.status == 200 and bytes(sink.buf) == _pattern(size)
                    assert r.keep_alive
        finally:
            pool.close()
            server.close()
            await server.wait_closed()

    asyncio.run(go())
