"""The LMCache plugin's options (s3kv/integrations/lmcache.py): ``extra_config`` keys
``s3kv_<name>`` from LMCache's configuration, else the ``S3KV_<NAME>`` environment variables; a
value that cannot be meant is a ConfigError naming the option, never a silent default. Needs no
LMCache."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from s3kv.config import parse_bool
from s3kv.errors import ConfigError, InvalidNamespace
from s3kv.store.catalog import validate_namespace


@dataclass(frozen=True)
class PluginSettings:
    """The plugin's options: ``extra_config`` keys ``s3kv_<name>``, else ``S3KV_<NAME>``."""

    url: str
    namespace: str
    token: str | None
    lookup_timeout: float = 5.0
    timeout: float = 60.0
    put_within: float = 5.0
    down_for: float = 10.0
    connections: int = 16
    direct_reads: bool = True

    @classmethod
    def from_config(cls, config: Any) -> PluginSettings:
        extra: dict[str, Any] = dict(getattr(config, "extra_config", None) or {})

        def opt(name: str, default: str | None = None) -> str | None:
            value = extra.get(f"s3kv_{name}", os.environ.get(f"S3KV_{name.upper()}", default))
            return None if value is None else str(value)

        known = sorted(f"s3kv_{n}" for n in _OPTIONS)
        unknown = sorted(k for k in extra if str(k).startswith("s3kv_") and k not in known)
        if unknown:  # a misspelt option would otherwise be its default, silently
            raise ConfigError(f"{unknown[0]} is not an s3kv plugin option; the options are "
                              f"{', '.join(known)}")
        url, namespace = opt("url"), opt("namespace")
        if not url or not namespace:
            raise ConfigError("the s3kv LMCache plugin needs extra_config s3kv_url "
                              "(http://HOST:PORT[,...]) and s3kv_namespace (or S3KV_URL and "
                              "S3KV_NAMESPACE)")
        try:  # one the gateway refuses to create would drop every put, for ever
            validate_namespace(namespace)
        except InvalidNamespace as exc:
            raise ConfigError(f"s3kv plugin option: s3kv_namespace: {exc}") from None
        access, secret = opt("access_key"), opt("secret_key")
        if bool(access) != bool(secret):
            raise ConfigError("give both s3kv_access_key and s3kv_secret_key (or S3KV_ACCESS_KEY "
                              "and S3KV_SECRET_KEY), or neither for a gateway without "
                              "credentials")
        try:
            settings = cls(url=url, namespace=namespace,
                           token=f"{access}:{secret}" if access and secret else None,
                           lookup_timeout=float(opt("lookup_timeout", "5") or 5),
                           timeout=float(opt("timeout", "60") or 60),
                           put_within=float(opt("put_within", "5") or 5),
                           down_for=float(opt("down_for", "10") or 10),
                           connections=int(opt("connections", "16") or 16),
                           direct_reads=parse_bool(opt("direct_reads", "true") or "true"))
        except (ValueError, ConfigError) as exc:
            raise ConfigError(f"s3kv plugin option: {exc}") from None
        for name in ("lookup_timeout", "timeout", "put_within", "down_for"):
            if not math.isfinite(getattr(settings, name)):  # YAML's .inf and .nan are floats
                raise ConfigError(f"s3kv plugin option: s3kv_{name} must be a finite number "
                                  f"of seconds")
        if min(settings.lookup_timeout, settings.timeout, settings.connections) <= 0 \
                or min(settings.put_within, settings.down_for) < 0:
            raise ConfigError("s3kv plugin option: s3kv_lookup_timeout, s3kv_timeout and "
                              "s3kv_connections must be positive, s3kv_put_within and "
                              "s3kv_down_for not negative")
        return settings


#: the options ``PluginSettings`` reads (``s3kv_<name>`` / ``S3KV_<NAME>``)
_OPTIONS = ("url", "namespace", "access_key", "secret_key", "lookup_timeout", "timeout",
            "put_within", "down_for", "connections", "direct_reads")


def plugin_variables() -> list[str]:
    """The environment variables the plugin reads (``S3KV_<NAME>`` of each option)."""
    return [f"S3KV_{n.upper()}" for n in _OPTIONS]
