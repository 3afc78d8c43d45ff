"""The catalog's namespaces: ids that fit the index's 16-bit field, and a clear refusal when
all are taken (s3kv/store/catalog.py)."""

from __future__ import annotations

import pytest

from s3kv.errors import TooManyNamespaces
from s3kv.store.catalog import Catalog
from s3kv.store.index import MAX_NAMESPACE_ID, Location

LOC = Location(1, 0, 1, 1, 0, 0, 0.0)


def test_every_namespace_id_fits_the_index_and_the_last_one_past_is_refused() -> None:
    """Before, the 65,536th namespace got an id the index could not store: every write into
    it failed with an OverflowError (a 500)."""
    cat = Catalog()
    for i in range(MAX_NAMESPACE_ID):
        cat.register_namespace(f"ns-{i}")
    last = cat.ns_id(f"ns-{MAX_NAMESPACE_ID - 1}")
    assert last == MAX_NAMESPACE_ID
    cat.put(last, b"k", LOC)
    assert cat.index.get(last, b"k") == LOC
    with pytest.raises(TooManyNamespaces) as refused:
        cat.register_namespace("one-more")
    assert refused.value.code == "TooManyBuckets" and "delete one" in str(refused.value)
    assert "one-more" not in cat.namespaces
    # a namespace dropped (empty) gives its id to the next one
    dropped = cat.drop_namespace("ns-7")
    assert cat.register_namespace("one-more") == dropped
    cat.put(dropped, b"k", LOC)
    assert cat.index.get(dropped, b"k") == LOC
