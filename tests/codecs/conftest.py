"""The codec tests' switch between kvq's compiled loops and its numpy path."""

from __future__ import annotations

import pytest

from s3kv.store.codecs import kvq_native


@pytest.fixture(params=["native", "numpy"])
def kvq_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs with kvq's compiled loops (``_kvq_native``) and on the numpy
    path that stands in where the extension is not built."""
    built = kvq_native.load()
    if request.param == "native" and built is None:
        pytest.skip("the kvq extension is not built")
    monkeypatch.setattr(kvq_native, "native", built if request.param == "native" else None)
    return str(request.param)
