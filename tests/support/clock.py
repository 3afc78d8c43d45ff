"""botocore's signing clock, set back: a real client's presigned URL that has already expired,
without a test sleeping until it does."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from typing import Any
from unittest import mock

import botocore.auth

#: how long ago the expiry tests' presigned URLs (valid for 1 s) stopped being valid; the
#: sleep it replaces waited 2.1 s
EXPIRED_BY = 2.0


@contextlib.contextmanager
def botocore_signs_earlier(seconds: float) -> Iterator[None]:
    """Within the block botocore signs as if it were ``seconds`` ago (its signers read the time
    through ``botocore.auth.get_current_datetime``; patching a name botocore no longer has
    fails, it never passes silently)."""
    real = botocore.auth.get_current_datetime
    shift = datetime.timedelta(seconds=seconds)

    def earlier(*args: Any, **kwargs: Any) -> datetime.datetime:
        now: datetime.datetime = real(*args, **kwargs)
        return now - shift

    with mock.patch.object(botocore.auth, "get_current_datetime", earlier):
        yield
