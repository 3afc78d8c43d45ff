"""MIXED: GET, STAT, PUT and DELETE on one object set in --mixed-ratio proportions."""

from __future__ import annotations

from warp.benchmarks.base import Benchmark, Context
from warp.payload import variant_of


class MixedBenchmark(Benchmark):
    op = "MIXED"
    uses_object_set = True

    async def run_op(self, ctx: Context, thread: int) -> bool:
        c = ctx.config
        m = c.mixed
        choice = ctx.rng.choices(("GET", "STAT", "PUT", "DELETE"),
                                 weights=(m.get, m.stat, m.put, m.delete))[0]
        if choice == "DELETE" and len(ctx.pool) <= c.concurrent:
            choice = "PUT"  # keep enough objects for the readers
        if choice in ("GET", "STAT", "DELETE") and not ctx.pool:
            choice = "PUT"
        victim = ctx.take_for_delete() if choice == "DELETE" else None
        if choice == "DELETE" and victim is None:
            choice = "PUT"  # every key of the pool is being read: write one instead
        if choice == "PUT":
            key = c.put_key(thread, ctx.next_seq())
            r = await ctx.put(key)
            if not r.error:
                ctx.pool.append(key)
        elif victim is not None:
            key = victim
            r = await ctx.client.delete_objects(c.bucket, [key])
        elif choice == "STAT":
            with ctx.reading(ctx.rng.choice(ctx.pool)) as key:
                r = await ctx.client.head_object(c.bucket, key, c.obj_size)
        else:
            with ctx.reading(ctx.rng.choice(ctx.pool)) as key:
                r = await ctx.client.get_object(
                    c.bucket, key, ctx.payload.expected(variant_of(key), 0, c.obj_size))
        ctx.recorder.add(choice, thread, key, r)
        return True


BENCHMARK = MixedBenchmark
HELP = "GET/STAT/PUT/DELETE on one object set in --mixed-ratio proportions (Warp's mixed)"
