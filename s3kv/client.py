"""Async client for the gateway's native API: the piece an inference connector embeds.

    async with S3KVClient("http://127.0.0.1:9470", token="ACCESS:SECRET") as kv:
        await kv.put_many("llama", {"h1": b"...", "h2": b"..."})
        n = await kv.lookup_prefix("llama", ["h1", "h2", "h3"])   # -> 2
        blocks = await kv.get_many("llama", ["h1", "h2"])          # -> [bytes | None, ...]

Several gateways: ``S3KVClient("http://gw-a:9470,http://gw-b:9470")``, or one URL naming a
headless Service (``http://s3kv-headless.kv.svc:9470``), resolved and re-resolved. Each key has a
home gateway (rendezvous hashing, s3kv/routing.py); a batch is split per gateway and the parts run
concurrently. A gateway that cannot be reached is skipped for ``down_for`` seconds: lookups and
gets count its keys as misses, puts go to each key's next choice.

Errors from the gateway become s3kv.errors: Backpressure (503 SlowDown, with retry_after; from
put_many also ``stored``, the leading blocks stored, so a retry sends the rest), NamespaceNotFound,
TooLarge, InvalidInput, RequestError, and BackendUnavailable when no gateway can be reached.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from types import TracebackType
from typing import Any

import aiohttp

from s3kv.client_direct import DirectReads
from s3kv.client_io import (
    LOOKUP_RESERVE,
    BlockBody,
    BlockData,
    FramedPayload,
    PutRounds,
    Sink,
    answer,
    answer_doc,
    block_size,
    error_from_response,
    framed_parts,
    pulled,
    request_parts,
    whole,
)
from s3kv.client_stream import GatewayLost, fetch_stream
from s3kv.errors import BackendUnavailable, Backpressure, RequestError
from s3kv.frames import FRAMES
from s3kv.routing import GatewaySet, Resolver, resolve_all
from s3kv.wire.fastget import GetPool

__all__ = ["BlockBody", "BlockData", "S3KVClient", "Sink"]


class S3KVClient:
    def __init__(self, endpoint: str | Sequence[str], *, token: str | None = None,
                 timeout: float = 60.0, connections: int = 16, lookup_timeout: float = 5.0,
                 connect_timeout: float = 2.0, down_for: float = 10.0,
                 resolve_every: float = 30.0, resolver: Resolver = resolve_all,
                 batch_bytes: int = 64 * 1024 * 1024, put_concurrency: int = 2,
                 direct_reads: bool = True) -> None:
        """``batch_bytes``: block bytes per batch-put request (a larger batch is sent as
        several, ``put_concurrency`` at a time per gateway; the gateway refuses a body over
        half its --max-request-memory). ``direct_reads``: read the blocks a gateway with
        ``--direct-reads`` locates straight from the object store (client_direct.py)."""
        self.gateways = GatewaySet(endpoint, down_for=down_for, resolve_every=resolve_every,
                                   resolver=resolver, resolve_timeout=connect_timeout)
        self.endpoint = self.gateways.urls[0]
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        self._lookup_timeout = aiohttp.ClientTimeout(lookup_timeout, connect=connect_timeout)
        self._connections = connections
        self._batch_bytes = batch_bytes
        self._put_concurrency = put_concurrency
        self._session: aiohttp.ClientSession | None = None
        self._direct = DirectReads(timeout, connect_timeout) if direct_reads else None
        self._pool = GetPool(connect_timeout=connect_timeout)  # batch gets (client_stream.py)
        self._stream_slots: dict[str, asyncio.Semaphore] = {}  # their connections, per gateway
        self._put_slots: dict[str, asyncio.Semaphore] = {}  # batch puts' connections

    async def open(self) -> S3KVClient:
        """Open the HTTP session (on the running loop); ``async with`` does it."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, headers=self._headers,
                connector=aiohttp.TCPConnector(limit_per_host=self._connections))
        return self

    async def __aenter__(self) -> S3KVClient:
        return await self.open()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._direct is not None:
            self._direct.close()
        self._pool.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _require_open(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise BackendUnavailable("the client is not open: use `async with "
                                     "S3KVClient(...)` (or `await client.open()`)")
        return self._session

    @asynccontextmanager
    async def _open(self, gateway: str, method: str, path: str, *, data: Any = None,
                    json_body: Any = None, headers: Mapping[str, str] | None = None,
                    limits: aiohttp.ClientTimeout | None = None
                    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A successful response, its body not read yet; errors become s3kv.errors. A gateway
        that cannot be reached (or times out) is marked down."""
        session = self._require_open()
        try:
            async with session.request(method, gateway + path, data=data,
                                             json=json_body, headers=headers,
                                             timeout=limits or self._timeout) as resp:
                if resp.status >= 400:
                    body = await resp.read()
                    raise error_from_response(resp.status, body, resp.headers)
                yield resp
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.gateways.mark_down(gateway)
            raise BackendUnavailable(f"gateway {gateway} unreachable: "
                                     f"{type(exc).__name__}: {exc}") from exc

    async def _request(self, gateway: str, method: str, path: str, **kw: Any) -> bytes:
        async with self._open(gateway, method, path, **kw) as resp:
            return await resp.read()

    async def _groups(self, keys: Sequence[str]) -> dict[str, list[int]]:
        await self.gateways.refresh()
        return self.gateways.split(keys)

    # ---- lookups ---------------------------------------------------------------------------
    async def lookup(self, namespace: str, keys: Sequence[str]) -> tuple[int, list[bool]]:
        """(number of leading keys present, presence of each key); one request per gateway."""
        keys = list(keys)
        present = [False] * len(keys)
        groups = await self._groups(keys)

        async def one(gateway: str, where: list[int]) -> None:
            for part in request_parts(where, lambda _i: 0, 1):
                body = await self._request(gateway, "POST", f"/v1/{namespace}/lookup",
                                           json_body={"keys": [keys[i] for i in part]},
                                           limits=self._lookup_timeout)
                got = answer(gateway, body, "present", list, items=bool, count=len(part))
                for i, p in zip(part, got, strict=True):
                    present[i] = bool(p)

        await self._each(groups, one)
        prefix = next((i for i, p in enumerate(present) if not p), len(keys))
        return prefix, present

    async def lookup_prefix(self, namespace: str, keys: Sequence[str]) -> int:
        return (await self.lookup(namespace, keys))[0]

    async def _each(self, groups: dict[str, list[int]],
                    one: Callable[[str, list[int]], Awaitable[None]]) -> None:
        """Run ``one`` per gateway concurrently. An unreachable gateway's keys stay misses;
        when none could be reached, BackendUnavailable. Other errors are raised."""
        results = await asyncio.gather(*(one(g, w) for g, w in groups.items()),
                                       return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for r in errors:
            if not isinstance(r, BackendUnavailable):
                raise r
        if errors and len(errors) == len(results):
            raise errors[0]

    # ---- gets ------------------------------------------------------------------------------
    async def fetch(self, namespace: str, keys: Sequence[str], sink: Sink,
                    done: list[bool] | None = None) -> list[bool]:
        """Stream the blocks of ``keys`` into ``sink`` as they arrive; which were delivered
        whole (False: a miss, or the stream broke), also in ``done`` as each arrives (a list of
        len(keys) Falses: it keeps what came before an error the fetch raises)."""
        keys = list(keys)
        done = [False] * len(keys) if done is None else done

        async def one(gateway: str, where: list[int]) -> None:
            for part in request_parts(where, lambda _i: 0, 1):
                if self._direct is not None and self._direct.wanted(gateway):
                    locate = functools.partial(self._locate, gateway, namespace,
                                               [keys[i] for i in part])
                    part = await self._direct.fetch(gateway, part, locate, sink, done)
                if part:
                    await self._fetch_part(gateway, namespace, [keys[i] for i in part], part,
                                           sink, done)

        await self._each(await self._groups(keys), one)
        return done

    async def _locate(self, gateway: str, namespace: str, keys: list[str]) -> bytes:
        return await self._request(gateway, "POST", f"/v1/{namespace}/locate",
                                   json_body={"keys": keys}, limits=self._lookup_timeout)

    async def _fetch_part(self, gateway: str, namespace: str, want: list[str],
                          where: list[int], sink: Sink, done: list[bool]) -> None:
        """One batch get into the sink's buffers (client_stream.py); sink errors pass as is."""
        self._require_open()
        limit = asyncio.timeout(self._timeout.total)
        try:
            slots = self._stream_slots.setdefault(gateway, asyncio.Semaphore(self._connections))
            async with limit, slots:
                await fetch_stream(self._pool, gateway, namespace, self._headers, want, where,
                                   sink, done)
        except GatewayLost:
            self.gateways.mark_down(gateway)
            raise
        except TimeoutError as exc:
            if not limit.expired():
                raise  # the sink's own
            self.gateways.mark_down(gateway)
            raise BackendUnavailable(f"gateway {gateway}: the batch get took over "
                                     f"{self._timeout.total} s") from exc

    async def get_many(self, namespace: str, keys: Sequence[str]) -> list[bytes | None]:
        """The blocks (None for a miss), in the order of ``keys``."""
        out: list[bytes | None] = [None] * len(keys)

        async def keep(i: int, body: BlockBody | None) -> None:
            if body is not None:
                out[i] = await whole(body)

        done = await self.fetch(namespace, keys, keep)
        return [b if ok else None for b, ok in zip(out, done, strict=True)]

    async def iter_many(self, namespace: str, keys: Sequence[str]
                        ) -> AsyncGenerator[tuple[str, bytes | None], None]:
        """(key, block or None) in the order of ``keys``. With one home gateway for all of them
        each block is handed out as soon as it arrives (the gateway streams a batch get, so a
        connector can place the first blocks of a chain while later ones are on their way,
        holding one block at a time); across gateways, after all parts are in."""
        keys = list(keys)
        groups = await self._groups(keys)
        if len(groups) != 1:
            for key, block in zip(keys, await self.get_many(namespace, keys), strict=True):
                yield key, block
            return
        gateway, where, done = next(iter(groups)), list(range(len(keys))), [False] * len(keys)
        async with aclosing(pulled(lambda sink: self._fetch_part(
                gateway, namespace, keys, where, sink, done))) as blocks:
            async for i, block in blocks:
                yield keys[i], block

    # ---- puts ------------------------------------------------------------------------------
    async def _put_group(self, gateway: str, namespace: str,
                         items: Sequence[tuple[str, BlockData]],
                         headers: Mapping[str, str]) -> int:
        # LOOKUP_RESERVE connections stay free: a lookup waits for one only the connect timeout
        width = max(1, self._connections - LOOKUP_RESERVE)
        async with self._put_slots.setdefault(gateway, asyncio.Semaphore(width)):
            body = await self._request(gateway, "POST", f"/v1/{namespace}/batch-put",
                                       data=FramedPayload(framed_parts(items)), headers=headers)
        return int(answer(gateway, body, "stored", int))

    async def put_each(self, namespace: str, items: Sequence[tuple[str, BlockData]],
                       *, durable: bool = False, within: float | None = None) -> list[bool]:
        """Store ``items`` through their home gateways; which were stored. A gateway that
        cannot be reached passes its blocks to their next choice (once). With ``within``,
        push-back (503 SlowDown) is honoured: what was not stored is sent again after the
        gateway's Retry-After, until ``within`` seconds have passed; without it, Backpressure
        is raised. Other gateway errors (bad key, unknown namespace) are raised."""
        headers = {"Content-Type": FRAMES}
        if durable:
            headers["x-s3kv-durability"] = "sealed"
        rounds = PutRounds(list(items), within)
        while rounds.pending:
            await self.gateways.refresh()
            groups = self.gateways.split([rounds.items[i][0] for i in rounds.pending])
            gates = {g: asyncio.Semaphore(self._put_concurrency) for g in groups}
            results = await asyncio.gather(
                *(self._put_part(g, namespace, part, rounds, headers, gates[g])
                  for g, w in groups.items()
                  for part in request_parts([rounds.pending[j] for j in w],
                                            lambda i: block_size(rounds.items[i][1]),
                                            self._batch_bytes)), return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException) and not isinstance(r, BackendUnavailable):
                    raise r
            if not await rounds.next_round():
                break
        return rounds.stored

    async def _put_part(self, gateway: str, namespace: str, idx: list[int], rounds: PutRounds,
                        headers: Mapping[str, str], gate: asyncio.Semaphore) -> None:
        try:
            async with gate:
                n = await self._put_group(gateway, namespace, [rounds.items[i] for i in idx],
                                          headers)
        except Backpressure as exc:
            if rounds.deadline is None:
                raise
            n = exc.stored
            rounds.push_back(idx[n:], exc.retry_after)
        except BackendUnavailable:
            n = 0
            if not rounds.fail_over(idx):
                raise
        for i in idx[:n]:
            rounds.stored[i] = True

    async def put_many(self, namespace: str, blocks: Mapping[str, bytes] | Sequence[
            tuple[str, bytes]], *, durable: bool = False) -> int:
        """Store the blocks; the number stored. Backpressure carries ``stored``, the number of
        leading blocks stored, so a retry sends the rest."""
        items = list(blocks.items()) if isinstance(blocks, Mapping) else list(blocks)
        if len(self.gateways.gateways) == 1:  # in order, one request after another
            headers = {"Content-Type": FRAMES}
            if durable:
                headers["x-s3kv-durability"] = "sealed"
            gateway, done = self.gateways.gateways[0], 0
            for part in request_parts(range(len(items)), lambda i: block_size(items[i][1]),
                                      self._batch_bytes):
                try:
                    done += await self._put_group(gateway, namespace,
                                                  [items[i] for i in part], headers)
                except Backpressure as exc:
                    raise Backpressure(str(exc), exc.retry_after, done + exc.stored) from exc
            return done
        stored = await self.put_each(namespace, items, durable=durable)
        if all(stored):
            return len(items)
        n = stored.index(False)
        if not any(stored):
            raise BackendUnavailable("no gateway took the blocks")
        raise Backpressure(f"{stored.count(False)} of {len(items)} blocks not stored", 1.0, n)

    # ---- the rest --------------------------------------------------------------------------
    async def create_namespace(self, namespace: str) -> bool:
        """Create the namespace on every gateway unless it exists; whether one created it."""
        await self.gateways.refresh()
        created: list[bool] = []

        async def one(gateway: str, _where: list[int]) -> None:
            body = await self._request(gateway, "PUT", f"/v1/{namespace}")
            created.append(bool(answer(gateway, body, "created", bool)))

        await self._each({g: [] for g in self.gateways.gateways}, one)
        return any(created)

    async def delete_many(self, namespace: str, keys: Sequence[str]) -> int:
        """Remove blocks through their home gateways; how many existed."""
        keys = list(keys)
        counts: list[int] = []

        async def one(gateway: str, where: list[int]) -> None:
            body = await self._request(gateway, "POST", f"/v1/{namespace}/delete",
                                       json_body={"keys": [keys[i] for i in where]})
            counts.append(int(answer(gateway, body, "deleted", int)))

        await self._each(await self._groups(keys), one)
        return sum(counts)

    async def list_keys(self, namespace: str, prefix: str = "", *, after: str = "",
                        limit: int = 1000) -> list[str]:
        """Up to ``limit`` keys under ``prefix`` after ``after``, every gateway's, in
        lexicographic order (the union of each gateway's first ``limit``)."""
        await self.gateways.refresh()
        found: set[str] = set()

        async def one(gateway: str, _where: list[int]) -> None:
            body = await self._request(gateway, "POST", f"/v1/{namespace}/list",
                                       json_body={"prefix": prefix, "after": after,
                                                  "limit": limit})
            found.update(answer(gateway, body, "keys", list, items=str))

        await self._each({g: [] for g in self.gateways.gateways}, one)
        return sorted(found)[:limit]

    async def ready(self) -> bool:
        """Whether every gateway answers /readyz."""
        async def one(gateway: str) -> bool:
            try:
                await self._request(gateway, "GET", "/readyz", limits=self._lookup_timeout)
            except (BackendUnavailable, RequestError, Backpressure):
                return False
            return True
        await self.gateways.refresh()
        return all(await asyncio.gather(*(one(g) for g in self.gateways.gateways)))

    async def flush(self) -> None:
        await self.gateways.refresh()
        for gateway in self.gateways.gateways:
            await self._request(gateway, "POST", "/v1/flush")

    async def stats(self) -> dict[str, float]:
        """The first gateway's counters (one per gateway: ``stats_of``)."""
        return await self.stats_of(self.gateways.gateways[0])

    async def stats_of(self, gateway: str) -> dict[str, float]:
        return answer_doc(gateway, await self._request(gateway, "GET", "/v1/stats"))


