"""A home gateway for every key: rendezvous hashing over a set of gateways that may change.

The native client is given several gateway URLs, or one URL whose host is the DNS name of a
headless Service (one A record per gateway pod). Every key has a ranking of the gateways (highest
random weight, "rendezvous" hashing): its home is the first that is up. Adding or removing a
gateway moves only the keys whose home it was. A gateway that failed a request is skipped for
``down_for`` seconds (its keys go to their next choice, where they are misses until replica sync
brings them over), then tried again.

Names are re-resolved every ``resolve_every`` seconds; a failed resolution, or one that takes over
``resolve_timeout`` seconds (a DNS server that does not answer), keeps the last set.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

import xxhash

from s3kv.argtypes import http_url
from s3kv.errors import ConfigError

#: resolves (host, port) to the addresses of every gateway behind that name
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve_all(host: str, port: int) -> list[str]:
    """Every address of ``host`` (A and AAAA records), in a stable order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def split_urls(urls: str | Sequence[str]) -> list[str]:
    """``"http://a:1,http://b:2"`` or a list of URLs -> the URLs, without trailing slashes."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = [u.strip().rstrip("/") for u in items if u.strip()]
    if not out:
        raise ConfigError("no gateway URL given (expected http://HOST:PORT[,http://HOST:PORT...])")
    for u in out:
        if http_url(u) is None:
            raise ConfigError(f"gateway URL {u!r} is not http(s)://HOST:PORT")
    return out


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _with_host(url: str, address: str) -> str:
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _seed(gateway: str) -> int:
    return xxhash.xxh3_64_intdigest(gateway.encode())


class GatewaySet:
    """The gateways a client routes to, who is down, and each key's home among the rest."""

    def __init__(self, urls: str | Sequence[str], *, down_for: float = 10.0,
                 resolve_every: float = 30.0, resolver: Resolver = resolve_all,
                 resolve_timeout: float = 2.0) -> None:
        self.urls = split_urls(urls)
        self.down_for = down_for
        self.resolve_every = resolve_every
        self.resolve_timeout = resolve_timeout
        self._resolver = resolver
        #: one URL with a DNS name: the name is resolved to every gateway behind it
        self._dns = (len(self.urls) == 1 and not _is_literal(urlsplit(self.urls[0]).hostname
                                                             or ""))
        self.gateways: list[str] = list(self.urls)
        self._seeds = {g: _seed(g) for g in self.gateways}
        self._down_until: dict[str, float] = {}
        self._resolved_at = -float("inf")
        self._lock = asyncio.Lock()

    async def refresh(self, *, force: bool = False) -> None:
        """Re-resolve the DNS name when it is due (a failed resolution keeps the last set, as
        does one past ``resolve_timeout``: every request waits for this one)."""
        if not self._dns or (not force
                             and time.monotonic() - self._resolved_at < self.resolve_every):
            return
        async with self._lock:
            if not force and time.monotonic() - self._resolved_at < self.resolve_every:
                return
            self._resolved_at = time.monotonic()
            parts = urlsplit(self.urls[0])
            try:
                async with asyncio.timeout(self.resolve_timeout):
                    addresses = await self._resolver(parts.hostname or "", parts.port or 80)
            except (OSError, TimeoutError):
                return
            if addresses:
                self.gateways = [_with_host(self.urls[0], a) for a in addresses]
                self._seeds = {g: _seed(g) for g in self.gateways}

    def mark_down(self, gateway: str) -> None:
        self._down_until[gateway] = time.monotonic() + self.down_for

    def is_up(self, gateway: str) -> bool:
        return self._down_until.get(gateway, 0.0) <= time.monotonic()

    def choices(self, key: str) -> list[str]:
        """Gateways for ``key``: the up ones in its order of preference, then the down ones."""
        k = key.encode("utf-8", "surrogatepass")  # a key no UTF-8 holds: its gateway refuses it
        ranked = sorted(self.gateways, reverse=True,
                        key=lambda g: xxhash.xxh3_64_intdigest(k, seed=self._seeds[g]))
        return [g for g in ranked if self.is_up(g)] + [g for g in ranked if not self.is_up(g)]

    def home(self, key: str) -> str:
        return self.choices(key)[0]

    def split(self, keys: Sequence[str]) -> dict[str, list[int]]:
        """Positions of ``keys`` grouped by home gateway (each group in key order)."""
        groups: dict[str, list[int]] = {}
        if len(self.gateways) == 1:
            return {self.gateways[0]: list(range(len(keys)))}
        for i, key in enumerate(keys):
            groups.setdefault(self.home(key), []).append(i)
        return groups
