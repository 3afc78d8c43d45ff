"""GET: upload an object set once, then read random objects (or aligned ranges) and verify."""

from __future__ import annotations

from warp.benchmarks.base import Benchmark, Context
from warp.payload import variant_of


class GetBenchmark(Benchmark):
    op = "GET"
    uses_object_set = True

    async def run_op(self, ctx: Context, thread: int) -> bool:
        c = ctx.config
        key = ctx.rng.choice(ctx.pool)
        offset, length = 0, c.obj_size
        if c.range_size:
            offset = ctx.rng.randrange(-(-c.obj_size // c.range_size)) * c.range_size
            length = min(c.range_size, c.obj_size - offset)
        expected = ctx.payload.expected(variant_of(key), offset, length)
        r = await ctx.client.get_object(c.bucket, key, expected, offset,
                                        length if c.range_size else 0)
        ctx.recorder.add(self.op, thread, key, r)
        return True


BENCHMARK = GetBenchmark
HELP = ("upload --objects objects, then GET random ones (whole, or --range-size ranges), "
        "verifying every byte against what was written")
