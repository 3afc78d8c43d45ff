"""STAT: HEAD random objects of the object set (checks the size that was written)."""

from __future__ import annotations

from warp.benchmarks.base import Benchmark, Context


class StatBenchmark(Benchmark):
    op = "STAT"
    uses_object_set = True

    async def run_op(self, ctx: Context, thread: int) -> bool:
        key = ctx.rng.choice(ctx.pool)
        r = await ctx.client.head_object(ctx.config.bucket, key, ctx.config.obj_size)
        ctx.recorder.add(self.op, thread, key, r)
        return True


BENCHMARK = StatBenchmark
HELP = "upload --objects objects, then HEAD random ones"
