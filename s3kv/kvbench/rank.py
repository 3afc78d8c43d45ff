"""``python -m s3kv.kvbench.rank``: one rank of ``s3kv bench kv``, an OS process of its own.

A rank runs ``users`` simulated users, each one conversation at a time, each conversation one
turn at a time (:mod:`s3kv.kvbench.workload`). A turn is:

1. **lookup** of the turn's whole context chain (leading blocks present = hits);
2. **read** (restore) of those leading blocks, verified;
3. **write** of the blocks that were not present (the recomputed rest of the prefix and the
   turn's new blocks).

Protocol (one JSON object per line): stdin ``{"spec": RunSpec, "rank": R}`` -> stdout
``{"ready": true}``; then per pass stdin ``{"pass": {"number": N, "mode": "fresh"|"replay",
"duration": S, "start_at": WALL_S}}`` -> stdout ``{"progress": {...}}`` lines every half second
and ``{"result": RankPass}``. A *fresh* pass starts new conversations until ``duration`` is
up (no turn starts after that; turns in flight finish and count); a *replay* pass runs exactly
the turns this rank completed in its fresh pass again, in the same order, with no time limit.
End of stdin: exit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from s3kv.clock import now_ns, now_s
from s3kv.kvbench.targets import GatewayTarget, IoResult, IoSetup, S3Target, Target
from s3kv.kvbench.workload import ContextDist, Workload
from s3kv.wire.sigv4 import Credentials
from warp.payload import PayloadSource
from warp.records import RecordWriter


@dataclass(frozen=True)
class RunSpec:
    """Everything a rank needs; round-trips through JSON."""

    target: str
    kind: str  # "gateway" or "s3"
    namespace: str = "kvbench"  # gateway namespace
    run_prefix: str = ""  # s3: keys live under PREFIX/run_prefix
    token: str = ""  # gateway bearer token ACCESS:SECRET
    ranks: int = 1
    users: int = 4  # per rank
    block_tokens: int = 16
    block_bytes: int = 2 << 20
    context: str = "uniform:1024-4096"
    turns: int = 4
    system_prompt_tokens: int = 1024
    shared_share: float = 0.5
    system_prompts: int = 1
    seed: int = 1
    inflight: int = 4
    batch_bytes: int = 32 << 20
    records_dir: str = ""
    region: str = ""

    def workload(self) -> Workload:
        return Workload(self.block_tokens, self.block_bytes, ContextDist.parse(self.context),
                        self.turns, self.system_prompt_tokens, self.shared_share,
                        self.system_prompts, self.seed)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class RankPass:
    """One rank's figures for one pass (latencies in milliseconds, one value per turn)."""

    rank: int
    number: int
    mode: str
    started_ns: int = 0
    ended_ns: int = 0
    turns: int = 0
    conversations: int = 0  # conversations whose every turn completed
    lookup_blocks: int = 0
    hit_blocks: int = 0
    read: IoResult = field(default_factory=IoResult)
    written: IoResult = field(default_factory=IoResult)
    lookup_errors: int = 0
    read_ms: list[float] = field(default_factory=list)  # turns that read (hit_blocks > 0)
    restore_ms: list[float] = field(default_factory=list)  # lookup + read, same turns
    write_ms: list[float] = field(default_factory=list)  # turns that wrote

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankPass:
        values = dict(d)
        values["read"] = IoResult(**values["read"])
        values["written"] = IoResult(**values["written"])
        return cls(**values)


def open_target(spec: RunSpec, io: IoSetup) -> Target:
    if spec.kind == "gateway":
        return GatewayTarget(io, spec.target, spec.namespace, spec.token, spec.batch_bytes)
    return S3Target(io, spec.target, spec.run_prefix, Credentials.from_environment(spec.region))


class Rank:
    def __init__(self, spec: RunSpec, rank: int) -> None:
        self.spec = spec
        self.rank = rank
        self.workload = spec.workload()
        records = None
        if spec.records_dir:
            records = RecordWriter(Path(spec.records_dir) / f"kv-rank{rank:03d}.csv.zst")
        self.io = IoSetup(PayloadSource(spec.seed), spec.block_bytes, spec.inflight,
                          connections=spec.users * spec.inflight + 4, records=records,
                          client_id=f"r{rank}")
        self.target = open_target(spec, self.io)
        #: per user, the (conversation number, turns completed) of the fresh pass
        self.history: list[list[tuple[int, int]]] = [[] for _ in range(spec.users)]

    async def close(self) -> None:
        await self.target.close()
        if self.io.records is not None:
            self.io.records.close("s3kv bench kv " + json.dumps(self.spec.to_dict()))

    async def turn(self, user: int, conv_keys: tuple[str, ...], out: RankPass) -> None:
        """One turn; its figures are added to ``out`` when it completes."""
        t0 = time.perf_counter()
        look = await self.target.lookup(user, conv_keys)
        t1 = time.perf_counter()
        hits = min(look.blocks, len(conv_keys))
        got = IoResult()
        read_ms = restore_ms = write_ms = -1.0
        if hits:
            got = await self.target.read(user, conv_keys[:hits])
            t2 = time.perf_counter()
            read_ms, restore_ms = (t2 - t1) * 1000, (t2 - t0) * 1000
        wrote = IoResult()
        if hits < len(conv_keys):
            t3 = time.perf_counter()
            wrote = await self.target.write(user, conv_keys[hits:])
            write_ms = (time.perf_counter() - t3) * 1000
        out.turns += 1
        out.lookup_blocks += len(conv_keys)
        out.hit_blocks += hits
        out.lookup_errors += look.errors
        out.read.first_error = out.read.first_error or look.first_error
        out.read.add(got)
        out.written.add(wrote)
        if read_ms >= 0:
            out.read_ms.append(read_ms)
            out.restore_ms.append(restore_ms)
        if write_ms >= 0:
            out.write_ms.append(write_ms)

    async def user_fresh(self, user: int, out: RankPass, deadline: float) -> None:
        """New conversations until ``deadline`` (monotonic); a started turn always finishes."""
        number = 0
        while time.monotonic() < deadline:
            conv = self.workload.conversation(self.rank, user, self.spec.users, number)
            self.history[user].append((number, 0))
            for t in range(len(conv.turn_ends)):
                if time.monotonic() >= deadline:
                    return
                await self.turn(user, conv.turn_keys(t), out)
                self.history[user][-1] = (number, t + 1)
            out.conversations += 1
            number += 1

    async def user_replay(self, user: int, out: RankPass, deadline: float) -> None:
        """The fresh pass's turns again (no time limit: ``deadline`` is not used)."""
        for number, turns in self.history[user]:
            conv = self.workload.conversation(self.rank, user, self.spec.users, number)
            for t in range(turns):
                await self.turn(user, conv.turn_keys(t), out)
            out.conversations += turns == len(conv.turn_ends)

    async def run_pass(self, number: int, mode: str, duration: float, start_at: float) -> RankPass:
        out = RankPass(self.rank, number, mode)
        self.target.cat = number
        if mode == "fresh":
            self.history = [[] for _ in range(self.spec.users)]
        delay = start_at - now_s()
        if delay > 0:
            await asyncio.sleep(delay)
        out.started_ns = now_ns()
        runner = self.user_fresh if mode == "fresh" else self.user_replay
        deadline = time.monotonic() + duration
        tasks = [asyncio.create_task(runner(u, out, deadline)) for u in range(self.spec.users)]
        try:
            while not all(t.done() for t in tasks):
                await asyncio.wait(tasks, timeout=0.5)
                for t in tasks:
                    if t.done() and not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]  # a bug, not an I/O error
                emit({"progress": progress(out)})
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        out.ended_ns = now_ns()
        self.history = [[(n, k) for n, k in h if k] for h in self.history]
        return out


def progress(p: RankPass) -> dict[str, int]:
    return {"turns": p.turns, "hit_blocks": p.hit_blocks, "lookup_blocks": p.lookup_blocks,
            "read_bytes": p.read.bytes, "written_bytes": p.written.bytes,
            "errors": p.read.errors + p.written.errors + p.lookup_errors}


def emit(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


async def _readline() -> dict[str, Any] | None:
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if not line:
        return None
    doc: dict[str, Any] = json.loads(line)
    return doc


async def serve() -> int:
    first = await _readline()
    if first is None:
        return 0
    spec = RunSpec(**first["spec"])
    rank = Rank(spec, int(first["rank"]))
    try:
        emit({"ready": True})
        while (msg := await _readline()) is not None:
            p = msg["pass"]
            result = await rank.run_pass(int(p["number"]), str(p["mode"]),
                                         float(p["duration"]), float(p["start_at"]))
            emit({"result": result.to_dict()})
    finally:
        await rank.close()
    return 0


def main() -> int:
    try:
        return asyncio.run(serve())
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
