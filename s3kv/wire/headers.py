"""A request's headers indexed by lowercase name, for the several readers of one request.

A PUT's headers are read by the object's content headers and user metadata, the codec
headers and the body reader's sizes, digests and checksums. Each of them used to walk all of
the request's headers and lowercase every name; :func:`index_headers` walks them once and the
readers look names up (exact, lowercase).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: lowercase header name -> every value, in the order received (a repeated header keeps all)
HeaderValues = dict[str, list[str]]


def is_decimal(text: str) -> bool:
    """``text`` is ASCII digits, one at least: how a number in a request is written. (Not
    ``str.isdigit()``, which takes other Unicode digits too: ``int()`` refuses ``²`` and reads
    ``\\u0661`` as 1.)"""
    return text.isascii() and text.isdigit()


def index_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> HeaderValues:
    """The headers by lowercase name (a multidict's repeated headers included)."""
    # not isinstance(headers, Mapping): multidict's proxies are Mappings by registration,
    # which makes that check an ABC walk on every request
    pairs = headers.items() if hasattr(headers, "items") else headers
    values: HeaderValues = {}
    for name, value in pairs:
        low = name.lower()
        seen = values.get(low)
        if seen is None:
            values[low] = [value]
        else:
            seen.append(value)
    return values


def last_of(heads: HeaderValues, names: Iterable[str]) -> dict[str, str]:
    """name -> last value, for each of ``names`` (lowercase) present: what a ``dict`` of the
    headers would hold."""
    return {n: found[-1] for n in names if (found := heads.get(n))}


def comma_list(heads: HeaderValues, name: str) -> list[str]:
    """The items of a comma-separated list header (Content-Encoding's codings, x-amz-trailer's
    names), in order, every one of its headers' lists joined, items stripped, blanks dropped."""
    joined = ",".join(heads.get(name, ()))
    return [c for c in (v.strip() for v in joined.split(",")) if c]
