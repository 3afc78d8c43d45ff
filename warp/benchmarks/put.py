"""PUT: each worker uploads new objects (multipart above --part-size, 4 parts in flight)."""

from __future__ import annotations

from warp.benchmarks.base import Benchmark, Context


class PutBenchmark(Benchmark):
    op = "PUT"

    async def run_op(self, ctx: Context, thread: int) -> bool:
        key = ctx.config.put_key(thread, ctx.next_seq())
        ctx.recorder.add(self.op, thread, key, await ctx.put(key))
        return True


BENCHMARK = PutBenchmark
HELP = "upload new objects (multipart above --part-size) and measure write throughput"
