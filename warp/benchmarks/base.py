"""What every benchmark type shares: the run context, the object set, one op per call."""

from __future__ import annotations

import asyncio
import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

from s3kv.errors import S3KVError
from warp.config import BenchConfig
from warp.opresult import OpResult
from warp.payload import PayloadSource, variant_of
from warp.recorder import Recorder
from warp.s3 import S3Client


class BenchError(S3KVError):
    """A benchmark cannot run (bucket cannot be created, object set cannot be uploaded)."""

    code = "BenchmarkFailed"


@dataclass
class Context:
    config: BenchConfig
    client: S3Client
    payload: PayloadSource
    recorder: Recorder
    rng: random.Random
    #: keys of the object set that exist now (GET/STAT/mixed read them, DELETE consumes them)
    pool: list[str] = field(default_factory=list)
    #: keys of the pool a GET or STAT is reading now: a DELETE leaves them alone, or the read
    #: would answer 404 and be recorded as the server's error
    busy: Counter[str] = field(default_factory=Counter)
    seq: int = 0

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    @contextmanager
    def reading(self, key: str) -> Iterator[str]:
        """Mark ``key`` as being read for the duration of the block."""
        self.busy[key] += 1
        try:
            yield key
        finally:
            self.busy[key] -= 1
            if not self.busy[key]:
                del self.busy[key]

    def take_for_delete(self) -> str | None:
        """Remove and return a random key of the pool that no read is using, or None."""
        n = len(self.pool)
        start = self.rng.randrange(n) if n else 0
        for i in range(n):
            j = (start + i) % n
            if self.pool[j] not in self.busy:
                return self.pool.pop(j)
        return None

    async def put(self, key: str) -> OpResult:
        """Upload one object of the run (multipart above --part-size)."""
        c = self.config
        variant = variant_of(key)
        if c.multipart(c.obj_size):
            return await self.client.multipart_put(c.bucket, key, variant, c.obj_size,
                                                   c.part_size, c.parts_in_flight)
        return await self.client.put_object(c.bucket, key, variant, c.obj_size)


class Benchmark(ABC):
    """One benchmark type. ``run_op`` performs and records one operation."""

    #: Warp's op name in records (PUT, GET, ...); mixed records several
    op: ClassVar[str]
    #: whether the type works on a prepared object set
    uses_object_set: ClassVar[bool] = False

    async def setup(self, ctx: Context) -> None:
        c = ctx.config
        r = await ctx.client.create_bucket(c.bucket)
        if r.error:
            raise BenchError(f"cannot create bucket {c.bucket!r} on {r.endpoint}: {r.error}")
        if self.uses_object_set:
            keys = [c.object_key(i) for i in range(c.objects)]
            if not c.prepared:
                await upload_object_set(ctx, keys)
            ctx.pool = keys

    @abstractmethod
    async def run_op(self, ctx: Context, thread: int) -> bool:
        """Do one operation and record it; return False when this worker has nothing left."""


async def upload_object_set(ctx: Context, keys: list[str]) -> None:
    """Warp's prepare step: upload the object set with --concurrent uploads (not recorded)."""
    todo = list(reversed(keys))
    errors: list[str] = []

    async def uploader() -> None:
        while todo and len(errors) < 10:
            key = todo.pop()
            r = await ctx.put(key)
            if r.error:
                errors.append(f"{key}: {r.error}")

    await asyncio.gather(*(uploader() for _ in range(min(ctx.config.concurrent, len(keys)))))
    if errors:
        raise BenchError(f"preparing the object set failed ({len(errors)} errors), first: "
                         f"{errors[0]}")

