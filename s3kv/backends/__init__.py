"""Object backends behind one small async interface: ``s3`` (aiobotocore) and ``file``."""

from __future__ import annotations

import os
from urllib.parse import parse_qs, unquote, urlsplit

from s3kv.argtypes import http_url
from s3kv.backends.base import Backend, ObjectInfo, UploadInfo
from s3kv.backends.file import FileBackend
from s3kv.backends.s3 import S3Backend, S3Location
from s3kv.config import READ_STALL
from s3kv.errors import ConfigError

DEFAULT_LOCAL_DIR = "s3kv-data"

__all__ = ["Backend", "FileBackend", "ObjectInfo", "S3Backend", "S3Location", "UploadInfo",
           "open_backend", "parse_s3_url"]


def parse_s3_url(url: str) -> S3Location:
    """``s3://BUCKET/PREFIX?endpoint=http://h1:9000,http://h2:9000&region=R``."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigError(f"invalid S3 store URL {url!r}: expected s3://BUCKET/PREFIX"
                          "?endpoint=http://HOST:PORT[,http://HOST2:PORT]")
    query = parse_qs(parts.query)
    endpoints: list[str] = []
    for value in query.get("endpoint", []):
        endpoints.extend(e.strip() for e in value.split(",") if e.strip())
    if not endpoints:
        env_ep = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if not env_ep:
            raise ConfigError(f"store URL {url!r} names no endpoint: add ?endpoint=http://HOST:PORT"
                              " (several comma-separated for round-robin) or set AWS_ENDPOINT_URL")
        endpoints = [env_ep]
    for ep in endpoints:
        if http_url(ep) is None:
            raise ConfigError(f"endpoint {ep!r} is not http(s)://HOST[:PORT]")
    prefix = unquote(parts.path.lstrip("/"))
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    region = query.get("region", [os.environ.get("AWS_DEFAULT_REGION", "us-east-1")])[0]
    return S3Location(parts.netloc, prefix, tuple(endpoints), region)


def default_store_url() -> str:
    return "file://" + os.path.abspath(DEFAULT_LOCAL_DIR)


async def open_backend(url: str, *, max_connections: int = 32, request_timeout: float = 30.0,
                       read_stall: float = READ_STALL) -> tuple[Backend, str]:
    """Open the backend a store URL names. Returns (backend, key prefix inside it).

    An empty URL means the embedded default, a ``./s3kv-data`` directory.
    """
    if not url:
        url = default_store_url()
    scheme = urlsplit(url).scheme
    if scheme == "file":
        path = unquote(urlsplit(url).path)
        if not path:
            raise ConfigError(f"invalid file store URL {url!r}: expected file:///ABSOLUTE/PATH")
        return await FileBackend(path).open(), ""
    if scheme == "s3":
        loc = parse_s3_url(url)
        backend = await S3Backend(loc, max_connections=max_connections,
                                  timeout=request_timeout, read_stall=read_stall).open()
        return backend, loc.prefix
    raise ConfigError(f"unsupported store URL {url!r}: use s3://BUCKET/PREFIX?endpoint=URL or "
                      "file:///PATH")
