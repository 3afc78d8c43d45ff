"""`s3kv plan` and s3kv.models: every expected figure is worked out by hand here, not by the code.

Units: decimal TB = 1e12 B, PB = 1e15 B, GB/s = 1e9 B/s, MB/s = 1e6 B/s; day = 86,400 s;
year = 365 days.
"""

from __future__ import annotations

import argparse
import json

import pytest

from s3kv.cli import build_parser, main
from s3kv.errors import ConfigError
from s3kv.models import block_bytes, get_model, kv_bytes_per_token, model_names
from s3kv.planning import PlanInputs, plan


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-9)


# ---------------------------------------------------------------------------- models


def test_model_bytes_per_token_by_hand() -> None:
    # layers x kv_heads x head_dim x 2 (K and V) x 2 bytes (bf16)
    assert get_model("llama3.1-8b").bytes_per_token == 32 * 8 * 128 * 2 * 2 == 131072
    assert get_model("llama3.1-70b").bytes_per_token == 80 * 8 * 128 * 2 * 2 == 327680
    assert get_model("qwen2.5-7b").bytes_per_token == 28 * 4 * 128 * 2 * 2 == 56 * 1024
    assert get_model("Llama3.1-8B").name == "llama3.1-8b"  # case-insensitive
    assert {"llama3.1-8b", "llama3.1-70b", "qwen2.5-7b"} <= set(model_names())


def test_tensor_parallel_split() -> None:
    assert kv_bytes_per_token("llama3.1-8b") == 131072
    assert kv_bytes_per_token("llama3.1-8b", tp=2) == 131072 // 2
    assert kv_bytes_per_token(get_model("llama3.1-70b"), tp=8) == 327680 // 8
    # tp=16 > 8 KV heads: heads are replicated, one per rank = 32 x 1 x 128 x 2 x 2
    assert kv_bytes_per_token("llama3.1-8b", tp=16) == 16384
    # a 16-token block of 8B at tp=2: 16 x 65536 B = 1 MiB
    assert block_bytes("llama3.1-8b", 16, tp=2) == 1024 * 1024
    with pytest.raises(ConfigError, match="does not divide"):
        kv_bytes_per_token("llama3.1-8b", tp=3)
    with pytest.raises(ConfigError, match="unknown model"):
        get_model("gpt-2")


# ---------------------------------------------------------------------------- planning


def test_seed_node_defaults() -> None:
    p = plan(PlanInputs())
    assert p.model == "llama3.1-8b"
    assert p.kv_bytes_per_token == 131072
    # 24 x 122.88 TB
    assert p.raw_tb_per_node == approx(2949.12)
    assert p.usable_tb_total == approx(2949.12)  # RAID-0-like default: usable = raw
    # 2949.12 TB / 2 U
    assert p.tb_per_rack_unit == approx(1474.56)
    # 1600 W / 2.94912 PB = 542.534722... W/PB ("about 540 W per PB")
    assert p.watts_per_pb == approx(542.5347222222222)
    # 0.6 x 2949.12e12 B = 1.769472e15 B/day ("1.77 PB of new data every day")
    assert p.write_budget_bytes_per_day_per_node == approx(1.769472e15)
    assert round(p.write_budget_pb_per_day_per_node, 2) == 1.77
    # 1.769472e15 / 86400 s = 20.48e9 B/s ("20 GB/s")
    assert p.write_budget_gb_s_per_node == approx(20.48)
    # 20.48e9 / 131072 B = 156,250 tokens/s ("roughly 156,000 tokens per second")
    assert p.write_budget_tokens_s_per_node == approx(156250)
    # 24 drives x 3000e6 B/s = 72e9 B/s ("about 72 GB/s"); / 131072 = 549,316.40625 tokens/s
    assert p.write_ceiling_gb_s_per_node == approx(72.0)
    assert p.write_ceiling_tokens_s_per_node == approx(549316.40625)
    # writing at the ceiling uses the rating 72/20.48 = 3.515625x as fast: 5 / 3.515625 years
    assert p.years_to_rating_at_ceiling == approx(1.4222222222222223)
    # 0.6 x 122.88 TB x 365 x 5 = 134,553.6 TB = 134.5536 PB (spec sheet: 134.3)
    assert p.rated_pbw_per_drive == approx(134.5536)
    # one 10,000-token session: 1.31072e9 B; 1e12 / 1.31072e9 = 762.9 -> 762 whole sessions
    assert p.session_bytes == approx(1.31072e9)
    assert p.sessions_per_tb == 762
    # 2949.12e12 / 1.31072e9 = 2,250,000 exactly
    assert p.sessions_per_node == 2_250_000
    assert p.write_rate_gb_s is None and p.years_to_rating is None
    assert p.warnings == []


def test_sessions_per_tb_matches_reference_csv() -> None:
    # s3kv/reference/kv-quant-quality.csv, 16 bits: 1743 sessions per TB at 10K tokens. That is
    # Qwen2.5-7B (57,344 B/token), decimal TB, whole sessions:
    # 1e12 / (10,000 x 57,344) = 1743.86 -> 1743 (TiB would give 1917; Llama 8B gives 762)
    p = plan(PlanInputs(model="qwen2.5-7b", context_tokens=10_000))
    assert p.sessions_per_tb == 1743


def test_seventy_b_fleet_of_eight() -> None:
    p = plan(PlanInputs(model="llama3.1-70b", nodes=8))
    assert p.kv_bytes_per_token == 327680
    assert p.drives_total == 192
    # 8 x 2949.12 TB = 23,592.96 TB ("23.6 PB")
    assert p.raw_tb_total == approx(23592.96)
    assert p.rack_units_total == 16 and p.psu_watts_total == 12800
    # 8 x 20.48 GB/s = 163.84 GB/s ("164 GB/s")
    assert p.write_budget_gb_s_total == approx(163.84)
    # 20.48e9 / 327680 = 62,500 tokens/s per node; x 8 = 500,000
    assert p.write_budget_tokens_s_per_node == approx(62500)
    assert p.write_budget_tokens_s_total == approx(500000)
    # 1e12 / (10,000 x 327,680) = 305.18 -> 305
    assert p.sessions_per_tb == 305
    # 72e9 x 8 / 327680 = 1,757,812.5 tokens/s
    assert p.write_ceiling_tokens_s_total == approx(1757812.5)


def test_codec_ratio_effect() -> None:
    p = plan(PlanInputs(codec_ratio=4.0))
    # 131072 / 4 = 32768 B stored per token
    assert p.kv_bytes_per_token == approx(32768)
    assert p.kv_bytes_per_token_uncompressed == 131072
    # 1e12 / (10,000 x 32,768) = 3051.76 -> 3051
    assert p.sessions_per_tb == 3051
    # the same 20.48 GB/s of drive writes now carries 20.48e9 / 32768 = 625,000 tokens/s
    assert p.write_budget_gb_s_per_node == approx(20.48)
    assert p.write_budget_tokens_s_per_node == approx(625000)


def test_write_rate_to_years() -> None:
    # 20,000 tokens/s of 8B: 20,000 x 131,072 = 2.62144e9 B/s; budget 20.48e9 B/s
    # share 2.62144 / 20.48 = 0.128; years = 5 / 0.128 = 39.0625
    p = plan(PlanInputs(write_rate_tokens_s=20_000))
    assert p.write_rate_gb_s == approx(2.62144)
    assert p.budget_used_fraction == approx(0.128)
    assert p.years_to_rating == approx(39.0625)
    assert p.warnings == []

    # the rate is fleet-wide: 4 nodes have 4x the budget, so 4x the years
    p4 = plan(PlanInputs(nodes=4, write_rate_tokens_s=20_000))
    assert p4.years_to_rating == approx(156.25)

    # MinIO EC:4 on 12-drive sets: usable 8/12; every KV byte costs 12/8 = 1.5 drive bytes
    pe = plan(PlanInputs(write_rate_tokens_s=20_000, ec_parity=4, ec_stripe=12))
    assert pe.usable_tb_per_node == approx(2949.12 * 8 / 12)  # 1966.08
    assert pe.drive_write_gb_s == approx(2.62144 * 1.5)
    assert pe.years_to_rating == approx(5 / (0.128 * 1.5))  # 26.0417
    # 20.48e9 / 1.5 / 131072 = 104,166.67 tokens/s
    assert pe.write_budget_tokens_s_per_node == approx(104166.66666666667)

    # 600,000 tokens/s = 78.6432e9 B/s: above the 72 GB/s ceiling and the 5-year rating
    # years = 5 x 20.48 / 78.6432 = 1.30208...
    ph = plan(PlanInputs(write_rate_tokens_s=600_000))
    assert ph.years_to_rating == approx(5 * 20.48 / 78.6432)
    assert len(ph.warnings) == 2
    assert "ceiling" in ph.warnings[0] and "warranty" in ph.warnings[1]


# ---------------------------------------------------------------------------- CLI

EXPECTED_KEYS = {
    "model", "kv_bytes_per_token_uncompressed", "codec_ratio", "kv_bytes_per_token",
    "context_tokens", "session_bytes", "nodes", "drives_per_node", "drives_total",
    "raw_tb_per_node", "raw_tb_total", "erasure", "usable_fraction", "usable_tb_per_node",
    "usable_tb_total", "sessions_per_tb", "sessions_per_node", "sessions_total",
    "rack_units_total", "tb_per_rack_unit", "psu_watts_total", "watts_per_pb",
    "drive_bytes_per_kv_byte", "rated_pbw_per_drive",
    "write_budget_bytes_per_day_per_node", "write_budget_bytes_per_day_total",
    "write_budget_pb_per_day_per_node", "write_budget_pb_per_day_total",
    "write_budget_gb_s_per_node", "write_budget_gb_s_total",
    "write_budget_tokens_s_per_node", "write_budget_tokens_s_total",
    "write_ceiling_gb_s_per_node", "write_ceiling_gb_s_total",
    "write_ceiling_tokens_s_per_node", "write_ceiling_tokens_s_total",
    "years_to_rating_at_ceiling", "write_rate_tokens_s", "write_rate_gb_s",
    "drive_write_gb_s", "budget_used_fraction", "years_to_rating", "warnings",
}


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--json", "--model", "llama3.1-70b", "--nodes", "2",
                 "--write-rate", "50000", "--codec-ratio", "2"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == EXPECTED_KEYS
    # 327680 / 2 = 163,840 B/token; 50,000 x 163,840 = 8.192e9 B/s over 2 x 20.48e9 B/s
    assert data["kv_bytes_per_token"] == approx(163840)
    assert data["write_rate_gb_s"] == approx(8.192)
    assert data["budget_used_fraction"] == approx(0.2)
    assert data["years_to_rating"] == approx(25.0)
    assert data["raw_tb_total"] == approx(5898.24)


def test_cli_sizes_and_custom_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--json", "--bytes-per-token", "128KiB", "--drive-tb", "30.72TB",
                 "--drives", "10"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "custom"
    assert data["kv_bytes_per_token"] == 131072
    assert data["raw_tb_per_node"] == approx(307.2)  # 10 x 30.72 TB


def test_cli_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--write-rate", "20000"]) == 0
    out = capsys.readouterr().out
    for figure in ("2,949.12", "1,474.56", "542.5", "1.769", "20.48", "156,250", "72.00",
                   "39.06", "TB", "GB/s", "tokens/s", "W/PB"):
        assert figure in out, figure


@pytest.mark.parametrize("argv,message", [
    (["--drives", "-3"], "drives must be a positive integer"),
    (["--nodes", "0"], "nodes must be a positive integer"),
    (["--model", "gpt-2"], "unknown model 'gpt-2'"),
    (["--codec-ratio", "0"], "codec ratio must be a positive number"),
    (["--write-rate", "-5"], "write rate"),
    (["--ec-parity", "4"], "needs --ec-stripe"),
    (["--ec-parity", "4", "--ec-stripe", "7"], "more than half"),
    (["--ec-parity", "2", "--ec-stripe", "10"], "do not split"),
])
def test_cli_bad_input(argv: list[str], message: str,
                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("s3kv plan: error:")
    assert message in err


def test_help_gives_every_default() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    plan_parser = sub.choices["plan"]
    flags = [a for a in plan_parser._actions if a.option_strings and a.dest not in ("help", "json")]
    assert len(flags) >= 16
    for action in flags:
        assert action.help and "default" in action.help, action.option_strings


@pytest.mark.parametrize("argv,figure", [
    (["--write-rate", "1e308"], "write_rate_gb_s"),  # 1e308 tokens/s x 131,072 B
    (["--psu-watts", "1e308", "--nodes", "10"], "psu_watts_total"),
    (["--drive-write-mbs", "1e305"], "write_ceiling_gb_s_per_node"),  # x 10^6 x 24 drives
])
def test_cli_inputs_that_overflow_are_refused(argv: list[str], figure: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Inputs of absurd magnitude overflow a float: before, `plan --json` printed `Infinity`
    (no JSON parser but Python's reads it) and exited 0; now it names the figure, exit 2."""
    assert main(["plan", "--json", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("s3kv plan: error: the inputs are too large")
    assert f"{figure} comes out as inf" in captured.err
    # the largest finite inputs still give a plan that strict JSON can read
    assert main(["plan", "--json", "--write-rate", "1e290"]) == 0
    json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))


def test_cli_drive_size_errors_speak_of_terabytes(capsys: pytest.CaptureFixture[str]) -> None:
    """--drive-tb takes decimal TB or a size with a unit. Before, a number the size parser did
    not read (-5, 1e3) was refused with the size parser's words, "write bytes (4096) or a number
    with a unit", though 4096 there means 4,096 TB; 1e3 TB was refused outright. Now a number is
    TB (checked like every figure: positive), and a bad unit names the flag's own forms."""
    assert main(["plan", "--drive-tb", "-5"]) == 2
    err = capsys.readouterr().err
    assert "drive TB must be a positive number, got -5.0" in err
    assert "write bytes" not in err
    with pytest.raises(SystemExit) as exited:  # argparse's usage error
        main(["plan", "--drive-tb", "5XB"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid drive size '5XB': write decimal TB (122.88) or a size with a unit" in err
    assert main(["plan", "--json", "--drive-tb", "1e3"]) == 0
    assert json.loads(capsys.readouterr().out)["raw_tb_per_node"] == approx(24 * 1000.0)


@pytest.mark.parametrize("argv,message", [
    (["--ec-parity", "4", "--ec-stripe", "24"], "EC stripe 24 is not an erasure set size MinIO "
                                                "builds: 2 to 16 drives"),
    (["--ec-stripe", "5"], "24 drives do not split into erasure sets of 5 drives"),
    (["--ec-stripe", "1"], "EC stripe 1 is not an erasure set size"),
])
def test_cli_ec_stripe_is_a_set_minio_builds(argv: list[str], message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Before, --ec-stripe was any positive integer: `--ec-parity 4 --ec-stripe 24` planned
    20/24 = 83 % usable on sets MinIO never builds (its sets are 2 to 16 drives), and a stripe
    without parity was not checked at all (`--ec-stripe 5` on 24 drives planned, ignoring it).
    Now both exit 2 naming the rule; EC:0 on a stripe that fits still plans (usable = raw)."""
    assert main(["plan", *argv]) == 2
    assert message in capsys.readouterr().err
    assert main(["plan", "--json", "--ec-stripe", "12"]) == 0
    assert json.loads(capsys.readouterr().out)["usable_fraction"] == 1.0
