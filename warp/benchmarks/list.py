"""LIST: upload the object set, then list it completely (all pages) as one operation."""

from __future__ import annotations

from warp.benchmarks.base import Benchmark, Context


class ListBenchmark(Benchmark):
    op = "LIST"
    uses_object_set = True

    async def run_op(self, ctx: Context, thread: int) -> bool:
        prefix = ctx.config.run_prefix + "set/"
        r = await ctx.client.list_objects(ctx.config.bucket, prefix)
        if not r.error and r.count != ctx.config.objects:
            r.error = f"listed {r.count} objects, expected {ctx.config.objects}"
        ctx.recorder.add(self.op, thread, prefix, r, n_objects=r.count)
        return True


BENCHMARK = ListBenchmark
HELP = "upload --objects objects, then list them all (1000 keys per page) per operation"
