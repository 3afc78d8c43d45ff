"""Front credentials and the namespaces each may use.

A gateway has any number of front credentials: the single ``access_key``/``secret_key`` pair
(unrestricted: every namespace) and those of ``credentials_file``, a TOML file of

    [[credential]]
    access_key = "team-a"
    secret_key = "..."
    namespaces = ["team-a-*", "shared"]   # bucket names or fnmatch globs; absent: all

A restricted credential never reads, lists, writes, deletes or learns the existence of a
namespace outside its patterns: every such request is ``403 AccessDenied``, decided before the
store is asked anything, so the answer is the same whether the bucket exists or not.
ListBuckets shows only the allowed namespaces; CreateBucket works only inside the patterns.
Store-wide operations (``/v1/flush``, ``/v1/stats``) need an unrestricted credential.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from s3kv.errors import ConfigError, RequestError

#: a pattern: what a bucket name may contain, plus the glob characters * ? [ ] !
_PATTERN = re.compile(r"^[a-z0-9.*?\[\]!-]{1,63}$")
_FIELDS = {"access_key", "secret_key", "namespaces"}


@dataclass(frozen=True)
class Credential:
    access_key: str
    secret_key: str
    #: fnmatch patterns of the namespaces this credential may use; None: all of them
    namespaces: tuple[str, ...] | None = None

    @property
    def unrestricted(self) -> bool:
        return self.namespaces is None

    @property
    def token(self) -> str:
        """The bearer token of this credential on /v1 (``ACCESS:SECRET``)."""
        return f"{self.access_key}:{self.secret_key}"

    def allows(self, namespace: str) -> bool:
        if self.namespaces is None:
            return True
        return any(fnmatchcase(namespace, p) for p in self.namespaces)


#: the caller when the gateway runs without credentials (anonymous, loopback only)
ANONYMOUS = Credential("", "", None)


def access_denied() -> RequestError:
    """The one answer to a namespace a credential may not use (exists or not)."""
    return RequestError("AccessDenied", "Access Denied", 403)


def check_namespace(cred: Credential, namespace: str) -> None:
    if not cred.allows(namespace):
        raise access_denied()


def require_unrestricted(cred: Credential) -> None:
    """Store-wide operations (flush, stats): only for credentials without namespace limits."""
    if not cred.unrestricted:
        raise access_denied()


def _credential(entry: Any, where: str) -> Credential:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: each [[credential]] must be a table")
    unknown = set(entry) - _FIELDS
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    access, secret = entry.get("access_key"), entry.get("secret_key")
    if not isinstance(access, str) or not access or not isinstance(secret, str) or not secret:
        raise ConfigError(f"{where}: access_key and secret_key must be non-empty strings")
    if any(c in access for c in "/:") or access.strip() != access:
        raise ConfigError(f"{where}: access_key {access!r} must not contain '/', ':' or "
                          "surrounding spaces")
    patterns = entry.get("namespaces")
    if patterns is None:
        return Credential(access, secret, None)
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ConfigError(f"{where}: namespaces must be a list of bucket names or patterns")
    bad = [p for p in patterns if not _PATTERN.match(p)]
    if bad:
        raise ConfigError(f"{where}: invalid namespace pattern(s) {bad}: use bucket-name "
                          "characters (a-z 0-9 . -) and the globs * ? [...]")
    return Credential(access, secret, tuple(patterns))


def parse_credentials(text: str, source: str = "credentials file") -> list[Credential]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    unknown = set(doc) - {"credential"}
    if unknown:
        raise ConfigError(f"{source}: unknown top-level key(s) {', '.join(sorted(unknown))}; "
                          "expected [[credential]] tables")
    entries = doc.get("credential", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: use [[credential]] (an array of tables)")
    return [_credential(e, f"{source}: credential #{i + 1}") for i, e in enumerate(entries)]


def load_credentials_file(path: str) -> list[Credential]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read credentials file {path}: {exc.strerror}") from None
    return parse_credentials(text, path)


def credential_table(access_key: str, secret_key: str, credentials_file: str
                     ) -> dict[str, Credential]:
    """Every front credential by access key: the single pair (unrestricted) and the file's."""
    found: list[Credential] = []
    if access_key:
        found.append(Credential(access_key, secret_key, None))
    if credentials_file:
        found.extend(load_credentials_file(credentials_file))
    return _by_key(found)


def _by_key(creds: Iterable[Credential]) -> dict[str, Credential]:
    table: dict[str, Credential] = {}
    for c in creds:
        if c.access_key in table:
            raise ConfigError(f"access key {c.access_key!r} is defined twice")
        table[c.access_key] = c
    return table
