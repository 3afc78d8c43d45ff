"""A loopback HTTP/1.1 proxy that injects backend faults between the gateway and the S3 server.

The gateway's store URL points at the proxy (``?endpoint=http://127.0.0.1:PROXY_PORT``); the
proxy forwards each request to the real server (moto) and, per request and with a configurable
probability, injects one fault instead:

- ``p_503`` / ``p_500``: answer ``503 SlowDown`` / ``500 InternalError`` (an S3 XML error body)
  without asking the server, then close the connection;
- ``p_drop``: drop the connection mid-body: half-way through the request body (uploads) or
  half-way through the server's response body (downloads);
- ``latency``: seconds added before each request is forwarded; ``bandwidth``: bytes per second at
  which request bodies are forwarded (a slow link: multipart uploads stay in flight longer).

Settings are plain attributes, changed at runtime from the test (``proxy.set(p_503=0.2)``,
``proxy.clear()``); ``proxy.counts`` says how many requests passed and how many faults of each
kind were injected. The proxy runs its own event loop in a daemon thread, so synchronous and
asynchronous tests use it alike; ``close()`` (or the context manager) stops it and every
connection it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections import Counter
from typing import Any

from tests.support.s3server import free_port

_ERROR_BODY = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
               "<Message>injected by the test's fault proxy</Message></Error>")
_REASONS = {500: ("Internal Server Error", "InternalError"), 503: ("Slow Down", "SlowDown")}
_CHUNK = 256 * 1024


class _Dropped(Exception):
    """A connection closed on purpose, mid-body."""


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, seed: int | None = None) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.latency = 0.0
        self.bandwidth = 0.0  # bytes/s for request bodies; 0: unlimited
        self.p_503 = 0.0
        self.p_500 = 0.0
        self.p_drop = 0.0
        self.counts: Counter[str] = Counter()
        self._rnd = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="fault-proxy")

    # ---- control ------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        fut.result(timeout=10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._client, self.host, self.port,
                                                  backlog=256)

    def set(self, **settings: float) -> None:
        for name, value in settings.items():
            if not hasattr(self, name) or name.startswith("_"):
                raise AttributeError(name)
            setattr(self, name, float(value))

    def clear(self) -> None:
        """No more faults, no added latency."""
        self.set(latency=0, bandwidth=0, p_503=0, p_500=0, p_drop=0)

    @property
    def faults(self) -> int:
        return sum(n for k, n in self.counts.items() if k != "requests")

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        fut = asyncio.run_coroutine_threadsafe(self._stop(), self._loop)
        with contextlib.suppress(Exception):
            fut.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- one client connection ----------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                method, headers = _parse_head(head)
                self.counts["requests"] += 1
                fault = self._pick_fault()
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    head = _drop_header(head, b"expect")
                if fault in (503, 500):
                    await _read_body(reader, headers, None, 0.0)
                    self.counts[f"error_{fault}"] += 1
                    writer.write(_error_response(fault))
                    await writer.drain()
                    return
                if self.latency:
                    self.counts["delayed"] += 1
                    await asyncio.sleep(self.latency)
                if up is None:
                    up = await asyncio.open_connection(*self.upstream)
                    self._writers.add(up[1])
                up_reader, up_writer = up
                up_writer.write(head)
                drop_request = fault == "drop" and _has_body(headers) and self._rnd.random() < .5
                await _read_body(reader, headers, up_writer, self.bandwidth,
                                 drop_half=drop_request)
                await up_writer.drain()
                resp_head = await up_reader.readuntil(b"\r\n\r\n")
                status, resp_headers = _parse_status(resp_head)
                has_body = method != "HEAD" and status not in (204, 304) and status >= 200 and \
                    resp_headers.get("content-length", "1") != "0"
                if fault == "drop" and not drop_request and not has_body:
                    raise _Dropped  # the server acted, the answer never arrives
                writer.write(resp_head)
                if has_body:
                    await _read_body(up_reader, resp_headers, writer, 0.0,
                                     drop_half=fault == "drop", until_eof=True)
                await writer.drain()
                if resp_headers.get("connection", "").lower() == "close":
                    return
        except _Dropped:
            self.counts["drop"] += 1
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                OSError):
            pass
        finally:
            for w in (writer, up[1] if up else None):
                if w is not None:
                    self._writers.discard(w)
                    w.transport.abort()

    def _pick_fault(self) -> int | str | None:
        r = self._rnd.random()
        if r < self.p_503:
            return 503
        r -= self.p_503
        if r < self.p_500:
            return 500
        r -= self.p_500
        if r < self.p_drop:
            return "drop"
        return None


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method = lines[0].split(" ", 1)[0]
    return method, _headers(lines[1:])


def _parse_status(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    return int(lines[0].split(" ", 2)[1]), _headers(lines[1:])


def _headers(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


def _drop_header(head: bytes, name: bytes) -> bytes:
    lines = head.split(b"\r\n")
    return b"\r\n".join(ln for ln in lines if not ln.lower().startswith(name + b":"))


def _has_body(headers: dict[str, str]) -> bool:
    return int(headers.get("content-length", "0") or 0) > 0 or "chunked" in headers.get(
        "transfer-encoding", "").lower()


def _error_response(status: int) -> bytes:
    reason, code = _REASONS[status]
    body = _ERROR_BODY.format(code=code).encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
            + ("Retry-After: 1\r\n" if status == 503 else "") + "\r\n").encode() + body


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str],
                     out: asyncio.StreamWriter | None, bandwidth: float, *,
                     drop_half: bool = False, until_eof: bool = False) -> None:
    """Copy one message body from ``reader`` to ``out`` (None: discard)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";")[0], 16)
            data = await reader.readexactly(size + 2)
            if out is not None:
                out.write(line + data)
            if drop_half:
                raise _Dropped
            if size == 0:
                # trailers, if any, end with an empty line
                while True:
                    trailer = await reader.readuntil(b"\r\n")
                    if out is not None:
                        out.write(trailer)
                    if trailer == b"\r\n":
                        return
        return
    if "content-length" not in headers:
        if not until_eof:
            return
        while data := await reader.read(_CHUNK):
            if out is not None:
                out.write(data)
                await out.drain()
        return
    left = int(headers["content-length"])
    cut = left // 2 if drop_half else -1
    while left > 0:
        take = min(_CHUNK, left)
        if cut >= 0:
            take = min(take, max(1, cut))
        data = await reader.readexactly(take)
        left -= len(data)
        if out is not None:
            out.write(data)
            await out.drain()
        if cut >= 0:
            cut -= len(data)
            if cut <= 0:
                raise _Dropped
        if bandwidth > 0:
            await asyncio.sleep(len(data) / bandwidth)
