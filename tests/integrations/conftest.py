"""The LMCache plugin tests' engines (test_lmcache*.py): made on a gateway, closed at the end."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.gateway import GW_ACCESS, GW_SECRET, Gateway


@pytest.fixture
def engine_for() -> Iterator[Any]:
    """Engine factory; every engine is closed at the end, and closing must be prompt."""
    # LMCache's objects: imported here, since only the LMCache tests (skipped without it) ask
    from tests.integrations.engine import Engine

    made: list[Engine] = []

    def make(gw: Gateway, url: str | None = None, **kw: Any) -> Engine:
        """An engine on ``gw`` (``url``: the s3kv_url to give instead of its endpoint)."""
        made.append(Engine(url or gw.endpoint, f"lmc-{uuid.uuid4().hex[:10]}",
                           (GW_ACCESS, GW_SECRET), diagnose=lambda: gw.log_text()[-8000:], **kw))
        return made[-1]

    yield make
    for e in made:
        assert e.close() < 2.0, "RemoteBackend.close() (the plugin's close) must return promptly"
