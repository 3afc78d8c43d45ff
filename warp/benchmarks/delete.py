"""DELETE: upload the object set, then delete it in batches of --batch (DeleteObjects)."""

from __future__ import annotations

from warp.benchmarks.base import Benchmark, Context


class DeleteBenchmark(Benchmark):
    op = "DELETE"
    uses_object_set = True

    async def run_op(self, ctx: Context, thread: int) -> bool:
        if not ctx.pool:
            return False  # everything is deleted: the run ends early, as Warp's does
        n = min(ctx.config.batch, len(ctx.pool))
        batch, ctx.pool[:] = ctx.pool[-n:], ctx.pool[:-n]
        r = await ctx.client.delete_objects(ctx.config.bucket, batch)
        ctx.recorder.add(self.op, thread, batch[0], r, n_objects=len(batch))
        return True


BENCHMARK = DeleteBenchmark
HELP = "upload --objects objects, then delete them --batch at a time; ends when none are left"
