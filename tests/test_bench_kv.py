"""``s3kv bench kv``: the workload model, the percentile definition, and runs against a real
gateway (subprocess) on the real S3 server, and against plain per-block S3 on it."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from s3kv.cli import main
from s3kv.errors import ConfigError
from s3kv.kvbench.rank import RankPass
from s3kv.kvbench.report import pass_report, pct
from s3kv.kvbench.workload import ContextDist, Workload
from tests.gateway.conftest import SMALL, TOKEN, backend_store, running_gateway
from tests.support.s3server import MotoServer
from warp.records import read_records

#: small blocks (16 tokens x 1 KiB) so a run moves a few MiB through moto
SMALL_RUN = ["--bytes-per-token", "1KiB", "--block-tokens", "16", "--context-tokens",
             "uniform:160-480", "--system-prompt-tokens", "64", "--duration", "2s"]


def run_bench(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["bench", "kv", *SMALL_RUN, *args, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    doc: dict[str, Any] = json.loads(out)
    return doc


# ---- percentiles as documented ------------------------------------------------------------
def test_percentile_is_sorted_index_floor_p_n() -> None:
    values = [float(v) for v in range(10, 210, 10)]  # 10..200, n = 20
    random.Random(3).shuffle(values)
    # index min(n-1, floor(p*n)): p50 -> 10 -> 110; p95 -> 19 -> 200; p99 -> 19 -> 200
    assert pct(values, 0.50) == 110.0
    assert pct(values, 0.95) == 200.0
    assert pct(values, 0.99) == 200.0
    hundred = [float(v) for v in range(1, 101)]  # p50 -> index 50 -> 51; p95 -> 95 -> 96
    assert pct(hundred, 0.50) == 51.0
    assert pct(hundred, 0.95) == 96.0
    assert pct(hundred, 0.99) == 100.0
    assert math.isnan(pct([], 0.95))


def test_p95_of_run_is_max_of_per_rank_p95() -> None:
    fast = RankPass(0, 1, "fresh", started_ns=0, ended_ns=10**9,
                    read_ms=[float(v) for v in range(1, 101)])  # p95 = 96
    slow = RankPass(1, 1, "fresh", started_ns=0, ended_ns=10**9,
                    read_ms=[10.0 * v for v in range(1, 21)])  # p95 = index 19 = 200
    doc = pass_report([fast, slow], 16, None)
    per_rank = {r["rank"]: r["read"]["p95"] for r in doc["read_latency_per_rank_ms"]}
    assert per_rank == {0: 96.0, 1: 200.0}
    assert doc["p95_read_ms_max_of_ranks"] == 200.0
    # pooled percentiles are reported too, and differ from the MLPerf figure
    assert doc["read_latency_ms"]["count"] == 120


# ---- the workload model -------------------------------------------------------------------
def test_context_distributions() -> None:
    rng = random.Random(1)
    u = ContextDist.parse("uniform:1000-8000")
    assert all(1000 <= u.sample(rng) <= 8000 for _ in range(200))
    assert ContextDist.parse("4096").sample(rng) == 4096
    ln = ContextDist.parse("lognormal:4000,0.5")
    mean = sum(ln.sample(rng) for _ in range(4000)) / 4000
    assert 3700 < mean < 4300  # MEAN is the mean of the length itself
    for bad in ("uniform:9-1", "normal:3", "lognormal:x,1", "0"):
        with pytest.raises(ConfigError):
            ContextDist.parse(bad)


def test_conversations_are_prefix_chains() -> None:
    w = Workload(16, 1024, ContextDist.parse("uniform:300-900"), turns=3,
                 system_prompt_tokens=64, shared_share=0.5, seed=9)
    a = w.conversation(0, 0, 4, 0)
    assert a == w.conversation(0, 0, 4, 0)  # a pure function of the seed and place
    assert a.system_blocks == 4
    assert len(a.turn_ends) == 3 and a.turn_ends[-1] == len(a.keys)
    for t in range(2):  # each turn's context extends the previous one
        assert a.turn_keys(t + 1)[:len(a.turn_keys(t))] == a.turn_keys(t)
    sharing = [u for u in range(4) if w.shares_prompt(0, u, 4)]
    assert len(sharing) == 2  # exactly floor(4 * 0.5) users share the system prompt
    x, y = (w.conversation(0, u, 4, 0) for u in sharing)
    assert x.keys[:4] == y.keys[:4] and x.keys[4] != y.keys[4]
    private = next(u for u in range(4) if u not in sharing)
    assert w.conversation(0, private, 4, 0).keys[0] != x.keys[0]
    assert len(set(a.keys)) == len(a.keys)


# ---- against the gateway on the real S3 server --------------------------------------------
def test_gateway_first_pass_misses_second_pass_hits(
        s3_server: MotoServer, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with running_gateway(backend_store(s3_server), SMALL, log_level="info") as gw:
        doc = run_bench(capsys, "--target", gw.endpoint, "--token", TOKEN, "--users", "2",
                        "--ranks", "2", "--turns", "1", "--shared-share", "0", "--passes", "2",
                        "--batch-size", "64KiB", "--benchdata", str(tmp_path))
    first, second = doc["passes"]
    # fresh conversations, one turn each, private prompts: nothing is stored yet
    assert first["mode"] == "fresh" and first["turns"] > 0
    assert first["hit_blocks"] == 0 and first["read_blocks"] == 0
    assert first["written_blocks"] == first["lookup_blocks"] > 0
    assert first["gateway"]["blocks_put"] == first["written_blocks"]
    assert first["gateway"]["hits"] == 0 and first["gateway"]["misses"] == 0
    # the same conversations again: every block hits, is read and verified, nothing written
    assert second["mode"] == "replay" and second["turns"] == first["turns"]
    assert second["lookup_blocks"] == first["lookup_blocks"]
    assert second["hit_blocks"] == second["read_blocks"] == second["lookup_blocks"]
    assert second["hit_ratio"] == 1.0 and second["written_blocks"] == 0
    assert second["gateway"]["hits"] == second["read_blocks"]
    assert second["gateway"]["misses"] == 0
    assert second["read_tokens_s"] > 0 and second["read_gib_s"] > 0
    per_rank = second["read_latency_per_rank_ms"]
    assert len(per_rank) == 2
    assert second["p95_read_ms_max_of_ranks"] == max(r["read"]["p95"] for r in per_rank)
    assert second["restore_ms"]["count"] == second["turns"]
    for p in doc["passes"]:
        assert p["errors"] == p["verify_failures"] == p["read_missing"] == 0
    assert doc["config"]["block_bytes"] == 16 * 1024 and doc["config"]["warnings"] == []
    records = [r for f in sorted(tmp_path.glob("kv-rank*.csv.zst")) for r in read_records(f)]
    gets = [r for r in records if r.op == "KVGET"]
    assert gets and all(r.cat == 2 and r.ok for r in gets)
    assert sum(r.n_objects for r in gets) == second["read_blocks"]
    # a restore is one streamed batch get, as s3kv's client reads a chain; writes are cut into
    # --batch-size requests (4 blocks of 16 KiB)
    assert len(gets) == second["restore_ms"]["count"]
    puts = [r for r in records if r.op == "KVPUT"]
    assert max(r.n_objects for r in puts) == 4 and len(puts) > first["turns"]


def test_gateway_multi_turn_hits_are_the_earlier_turns(
        s3_server: MotoServer, capsys: pytest.CaptureFixture[str]) -> None:
    with running_gateway(backend_store(s3_server), SMALL, log_level="info") as gw:
        doc = run_bench(capsys, "--target", gw.endpoint, "--token", TOKEN, "--users", "1",
                        "--turns", "3", "--shared-share", "0", "--seed", "5")
    (first,) = doc["passes"]
    # one user: conversation 0 turns 0..2, then conversation 1, ... in order
    w = Workload(16, 16 * 1024, ContextDist.parse("uniform:160-480"), turns=3,
                 system_prompt_tokens=64, shared_share=0.0, seed=5)
    expected_hits = expected_lookup = 0
    for i in range(first["turns"]):
        conv = w.conversation(0, 0, 1, i // 3)
        t = i % 3
        expected_lookup += conv.turn_ends[t]
        expected_hits += conv.turn_ends[t - 1] if t else 0
    assert first["lookup_blocks"] == expected_lookup
    assert first["hit_blocks"] == first["read_blocks"] == expected_hits > 0
    assert first["gateway"]["hits"] == expected_hits and first["gateway"]["misses"] == 0
    assert first["written_blocks"] == expected_lookup - expected_hits
    assert 0 < first["hit_ratio"] < 1


# ---- plain one-object-per-block S3 --------------------------------------------------------
def test_s3_target_per_block_objects(s3_server: MotoServer, bucket: str, s3_client: Any,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    target = f"s3://{bucket}/plain?endpoint={s3_server.endpoint}"
    doc = run_bench(capsys, "--target", target, "--users", "2", "--turns", "2",
                    "--passes", "2", "--inflight", "8")
    first, second = doc["passes"]
    assert first["turns"] > 0 and first["written_blocks"] > 0
    assert 0 < first["hit_blocks"] < first["lookup_blocks"]  # turn 2 reuses turn 1
    assert second["hit_ratio"] == 1.0 and second["read_blocks"] == second["lookup_blocks"]
    assert "gateway" not in second
    for p in doc["passes"]:
        assert p["errors"] == p["verify_failures"] == 0
    # the run removed its objects
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def test_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "kv", "--target", "ftp://x"]) == 2
    assert main(["bench", "kv", "--target", "s3://b/p?endpoint=http://127.0.0.1:1",
                 "--tier", "storage+dram"]) == 2
    assert main(["bench", "kv", "--model", "llama3.1-8b", "--tp", "3"]) == 2
    capsys.readouterr()
    for flags, message in ((["--duration", "0"], "--duration must be positive"),
                           (["--batch-size", "0"], "--batch-size must be at least 1 byte"),
                           (["--token", "abc"], "--token must be ACCESS:SECRET")):
        # refused before the gateway is asked anything (none listens on port 1)
        assert main(["bench", "kv", "--target", "http://127.0.0.1:1", *flags]) == 2
        assert message in capsys.readouterr().err


def test_an_error_answer_is_shown_as_text(s3_server: MotoServer,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The gateway's XML error message with its entities made characters again."""
    with running_gateway(backend_store(s3_server), SMALL) as gw:
        code = main(["bench", "kv", "--target", gw.endpoint, "--token", TOKEN, "--namespace",
                     "Bad_NS", "--duration", "1s"])
    assert code == 2
    assert "invalid namespace (bucket) name 'Bad_NS'" in capsys.readouterr().err
