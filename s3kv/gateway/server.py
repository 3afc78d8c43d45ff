"""Running the gateway: open the store, serve HTTP, shut down gracefully on SIGTERM/SIGINT.

Shutdown: stop accepting, let requests in flight finish (at most ``SHUTDOWN_GRACE`` seconds),
cut those left, seal open segments and complete their uploads, then exit 0. Nothing
acknowledged is lost by a SIGTERM. A second signal ends the wait for requests in flight at
once; one during the seal stops it (exit 1: what was not sealed is lost, as with a kill).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import ipaddress
import signal
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

from aiohttp import web
from threadpoolctl import threadpool_limits

from s3kv.argtypes import listen_address
from s3kv.config import Settings
from s3kv.errors import ConfigError
from s3kv.gateway.access import credential_table
from s3kv.gateway.app import make_app
from s3kv.gateway.fdlimit import raise_open_files
from s3kv.gateway.heap import keep_freed_memory
from s3kv.gateway.memlimit import check_memory
from s3kv.gateway.multipart import MIN_PART
from s3kv.gateway.plainlane import PlainLane
from s3kv.gateway.protocol import S3Server, front_runner
from s3kv.gateway.state import STATE
from s3kv.gateway.uploads import UPLOADS, Uploads
from s3kv.log import get_logger, loop_exception_handler
from s3kv.sizes import format_size
from s3kv.store.codecs.spec import check_default_codec
from s3kv.store.store import BlockStore

log = get_logger(__name__)
T = TypeVar("T")

#: seconds requests in flight get to finish after SIGTERM (what is cut off was never answered)
SHUTDOWN_GRACE = 15.0
#: then, aiohttp's own wait for handlers it has cancelled
SHUTDOWN_TIMEOUT = 5.0
#: tracked allocations (net) between generation-0 collections (CPython's default: 700)
GC_THRESHOLD = 50_000


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings, host: str) -> None:
    if settings.access_key and not settings.secret_key:
        raise ConfigError("S3KV_ACCESS_KEY is set but S3KV_SECRET_KEY is not: set both")
    if not (settings.access_key or settings.credentials_file) and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} without authentication: set S3KV_ACCESS_KEY and "
            "S3KV_SECRET_KEY (clients sign with them), or listen on 127.0.0.1")


def check_settings(settings: Settings) -> None:
    """The settings the store and the gateway own, checked before anything starts (config.py
    checks the rest on load): the default codec, the front credentials, an S3 store's parts."""
    check_default_codec(settings.default_codec)
    if (settings.store.startswith("s3://") and settings.part_size < MIN_PART
            and settings.part_size < settings.segment_size):
        raise ConfigError(
            f"part_size ({format_size(settings.part_size)}) is below S3's 5MiB minimum part: "
            "every segment upload of an S3 store would fail at its completion "
            "(EntityTooSmall); raise --part-size to 5MiB or more, or to --segment-size (one "
            "PUT per segment)")
    if settings.credentials_file or settings.access_key:
        credential_table(settings.access_key, settings.secret_key, settings.credentials_file)


def tune_gc() -> None:
    """Collect cyclic garbage less often: the request path makes almost none (11 objects
    found in 83 collections during 7 s of 256 KiB PUTs), yet at the default threshold a
    generation-0 collection ran every ~190 PUTs and the collector took 1.3% of the gateway's
    CPU. What exists once the store is open (index, catalog, the app) lives as long as the
    process: frozen, no collection scans it again."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 20)


def tune_process(settings: Settings) -> None:
    """The process as a gateway runs it: the collector tuned, freed memory kept up to what the
    settings let the gateway hold (request bodies, blocks read, the DRAM tier, the open
    segments)."""
    tune_gc()
    keep_freed_memory(settings.held_memory)


async def start_front(store: BlockStore, settings: Settings, *,
                      lane: bool = True) -> tuple[web.AppRunner, web.ServerRunner]:
    """The application on ``store`` and the runner of its connections, both set up (not yet
    listening); the caller cleans up the front runner, then the app runner. ``lane``: plain
    PUTs and GETs served in the plain lane (plainlane.py); without it every request goes
    through aiohttp's handler."""
    app = make_app(store, settings)
    uploads = app[UPLOADS] = Uploads()
    # auto_decompress=False: a body sent with Content-Encoding: gzip is stored as sent (S3
    # semantics; its signed hash and Content-MD5 cover the compressed bytes)
    # the app runner starts and cleans up the application; the front runner holds the
    # connections, whose own parse errors are S3 XML too (protocol.py)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT)
    await runner.setup()
    state = app[STATE]
    state.budget.reclaim = functools.partial(uploads.reclaim, state)  # idle uploads give way
    # keepalive_timeout: aiohttp's own default is an hour; the plain lane closes at the same
    # idle_timeout, so a connection's idle limit does not depend on which one serves it
    front = front_runner(runner, shutdown_timeout=SHUTDOWN_TIMEOUT, access_log=None,
                         auto_decompress=False, keepalive_timeout=settings.idle_timeout,
                         lane=(lambda handler: PlainLane(state, handler)) if lane else None)
    await front.setup()
    return runner, front


async def serve(settings: Settings, ready: asyncio.Event | None = None) -> int:
    """Serve until SIGTERM or SIGINT, then shut down (:func:`shut_down`): the exit code, 0 when
    everything was sealed, 1 when a signal stopped the seal."""
    asyncio.get_running_loop().set_exception_handler(loop_exception_handler)
    check_settings(settings)
    check_memory(settings)  # this machine's: not in check_settings, which tests run anywhere
    host, port = listen_address(settings.listen)
    check_exposure(settings, host)
    raise_open_files()  # before the store maps its files and clients connect (fdlimit.py)
    if not (settings.access_key or settings.credentials_file):
        log.warning("gateway.unauthenticated", detail="no S3KV_ACCESS_KEY/S3KV_SECRET_KEY: "
                    "serving without authentication on loopback only")
    # kvq's matmuls are small: BLAS threads cost more than they give, and codec work already
    # runs in worker threads beside the event loop
    threadpool_limits(1)
    store = await BlockStore.open(settings)
    runner, front = await start_front(store, settings)
    try:
        site = web.TCPSite(front, host, port, backlog=1024, reuse_address=True)
        await site.start()
    except OSError as exc:
        await front.cleanup()
        await runner.cleanup()
        await store.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    tune_process(settings)
    signals = Signals()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signals.received)
    log.info("gateway.listening", url=f"http://{host}:{port}", store=store.backend.description,
             blocks=len(store.index))
    print(f"s3kv gateway listening on http://{host}:{port} "
          f"(store: {store.backend.description})", file=sys.stdout, flush=True)
    if ready is not None:
        ready.set()
    try:
        await signals.after(0)
    finally:
        sealed = await shut_down(store, runner, front, site, signals)
    return 0 if sealed else 1


async def shut_down(store: BlockStore, runner: web.AppRunner, front: web.ServerRunner,
                    site: web.BaseSite, signals: Signals) -> bool:
    """Stop accepting, let requests in flight finish (at most ``SHUTDOWN_GRACE`` seconds, or
    until a second signal), cut what is left, seal the open segments (until a third signal:
    what is not sealed then is lost, as with a kill). Whether the seal completed."""
    log.info("gateway.stopping")
    state = runner.app[STATE]
    state.shutting_down = True
    # Stop accepting first, then let requests in flight finish while their connections are
    # still read from. aiohttp's runner.cleanup() closes every connection *before* waiting
    # for handlers, and a closed connection drops incoming bytes: an upload in progress then
    # waits for a body that never arrives until the shutdown timeout (30 s of nothing, and
    # a pod's default grace period is 30 s). New requests on kept-alive connections get
    # 503 ServiceUnavailable with Connection: close (see app.gateway_middleware).
    await site.stop()
    server = front.server
    if isinstance(server, S3Server):
        server.stop_lingering()  # a 503's connection is closed, not read until its body ends
    left = await signals.unless_another(1, state.drain(SHUTDOWN_GRACE))
    seen = signals.count  # a signal from here on stops the seal
    if left is None or left:
        # what did not finish is cut now: aiohttp would otherwise wait for each request
        # another SHUTDOWN_TIMEOUT before it cancels it
        log.warning("gateway.drain_timeout" if left else "gateway.drain_cut",
                    requests=state.inflight, grace=SHUTDOWN_GRACE)
        if isinstance(server, S3Server):
            server.cut()
    await front.cleanup()
    await runner.cleanup()
    if await signals.unless_another(seen, _closed(store)) is None:
        log.warning("gateway.stop_forced", open_segment_bytes=store.writer.memory_bytes(),
                    detail="a signal during the seal: blocks not sealed yet are lost")
        return False
    log.info("gateway.stopped", sealed=store.stats.segments_sealed)
    return True


async def _closed(store: BlockStore) -> bool:
    await store.close()
    return True


class Signals:
    """SIGTERM and SIGINT as they arrive: the first starts the shutdown, each one after it ends
    the step of the shutdown under way (the wait for requests in flight, then the seal)."""

    def __init__(self) -> None:
        self.count = 0
        self._arrived = asyncio.Event()

    def received(self) -> None:
        self.count += 1
        self._arrived.set()

    async def after(self, seen: int) -> None:
        """Wait for a signal after the first ``seen``."""
        while self.count <= seen:
            self._arrived.clear()
            await self._arrived.wait()

    async def unless_another(self, seen: int, step: Coroutine[Any, Any, T]) -> T | None:
        """``step``'s result, or None once a signal after the first ``seen`` cancelled it."""
        task = asyncio.ensure_future(step)
        signal_task = asyncio.ensure_future(self.after(seen))
        try:
            await asyncio.wait([task, signal_task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            signal_task.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return None
