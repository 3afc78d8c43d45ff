"""Analysis of records made from known synthetic ops: expected figures computed by hand.

Run: from T to T+8 s, so with 2 s trimmed at each end the window is [T+2, T+6): four 1-second
buckets b0..b3. Operations (GET, seconds relative to T, bytes, ttfb ms):

    a  [0.00, 8.00)  8000 B  ttfb 10   -> 1000 B in every bucket (outside the window itself)
    b  [2.00, 3.00)   500 B  ttfb 20   -> b0 +500
    c  [3.50, 4.25)   750 B  ttfb 30   -> b1 +500 (0.5 of 0.75 s), b2 +250
    d  [5.00, 5.50)  3000 B  ttfb 40   -> b3 +3000
    f  [2.50, 2.75)   200 B  ttfb 50   -> b0 +200
    e  [4.00, 4.25)   100 B  error "boom"                    -> nothing, 1 error
    g  [4.00, 4.50)   300 B  error "verify: checksum ..."    -> nothing, 1 verification failure

Buckets: b0 = 1000+500+200 = 1700, b1 = 1000+500 = 1500, b2 = 1000+250 = 1250,
b3 = 1000+3000 = 4000 (bytes/s). Sorted 1250, 1500, 1700, 4000: upper median 1700 (index 2),
fastest 4000, slowest 1250, average 8450 / 4 = 2112.5.

Successful ops inside the window: b, c, d, f -> latencies 1000, 750, 500, 250 ms, sorted
250, 500, 750, 1000: p50 = index floor(0.5*4) = 2 -> 750, p90 = index 3 -> 1000, p99 -> 1000;
ttfb 20, 30, 40, 50: p50 40, p90 50.

Whole run (a, b, c, d, f): latencies 250, 500, 750, 1000, 8000: p50 = index 2 -> 750,
p90 = index floor(4.5) = 4 -> 8000; ttfb 10..50: p50 30; bytes 12450 over 8 s = 1556.25 B/s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from warp.analysis import AnalysisOptions, analyze_files, percentile
from warp.analysis.report import to_csv, to_json, to_text
from warp.records import Record, read_records, write_records

T = 1_700_000_000 * 10**9 + 123_456_789  # an arbitrary wall-clock instant, in ns
S = 10**9

OPS = [  # name, client, start s, end s, bytes, ttfb ms, error
    ("a", "c1", 0.0, 8.0, 8000, 10, ""),
    ("b", "c2", 2.0, 3.0, 500, 20, ""),
    ("c", "c1", 3.5, 4.25, 750, 30, ""),
    ("d", "c2", 5.0, 5.5, 3000, 40, ""),
    ("f", "c1", 2.5, 2.75, 200, 50, ""),
    ("e", "c2", 4.0, 4.25, 100, 5, "boom"),
    ("g", "c1", 4.0, 4.5, 300, 5, "verify: checksum mismatch"),
]


def _records(client: str | None = None) -> list[Record]:
    return [Record(op="GET", thread=i, client_id=c, endpoint="http://e1", file=name,
                   size=size, start_ns=T + int(s0 * S), end_ns=T + int(s1 * S),
                   first_byte_ns=T + int(s0 * S) + ttfb * 10**6, error=err,
                   http_status=500 if err == "boom" else 200)
            for i, (name, c, s0, s1, size, ttfb, err) in enumerate(OPS)
            if client is None or c == client]


@pytest.fixture
def two_client_files(tmp_path: Path) -> list[Path]:
    """The ops split over two record files, one per client, as a sweep phase has them."""
    paths = [tmp_path / "c1.csv.zst", tmp_path / "c2.csv.zst"]
    write_records(paths[0], _records("c1"))
    write_records(paths[1], _records("c2"))
    return paths


def test_windowed_figures_match_hand_computation(two_client_files: list[Path]) -> None:
    [a] = analyze_files(two_client_files, AnalysisOptions(trim_s=2.0, bucket_s=1.0))
    assert a.op == "GET" and a.ops == 7 and a.clients == 2
    assert a.errors == 2 and a.verify_failures == 1
    assert a.buckets_bps == pytest.approx((1700.0, 1500.0, 1250.0, 4000.0))
    assert a.median_bps == pytest.approx(1700.0)
    assert a.fastest_bps == pytest.approx(4000.0)
    assert a.slowest_bps == pytest.approx(1250.0)
    assert a.average_bps == pytest.approx(2112.5)
    assert a.latency is not None and a.ttfb is not None
    assert (a.latency.p50, a.latency.p90, a.latency.p99) == pytest.approx((750, 1000, 1000))
    assert (a.ttfb.p50, a.ttfb.p90, a.ttfb.p99) == pytest.approx((40, 50, 50))
    assert a.latency.count == 4


def test_whole_run_exact_figures(two_client_files: list[Path]) -> None:
    [a] = analyze_files(two_client_files)
    assert a.run_bytes == 12450
    assert a.run_bps == pytest.approx(1556.25)
    assert a.run_latency is not None and a.run_ttfb is not None
    assert (a.run_latency.p50, a.run_latency.p90, a.run_latency.p99) == pytest.approx(
        (750, 8000, 8000))
    assert a.run_latency.fastest == pytest.approx(250)
    assert a.run_ttfb.p50 == pytest.approx(30)


def test_one_file_or_two_give_the_same_answer(two_client_files: list[Path],
                                              tmp_path: Path) -> None:
    write_records(tmp_path / "all.csv.zst", _records())
    [one] = analyze_files([tmp_path / "all.csv.zst"])
    [two] = analyze_files(two_client_files)
    assert one.buckets_bps == pytest.approx(two.buckets_bps)
    assert read_records(tmp_path / "all.csv.zst") == sorted(_records(), key=lambda r: r.thread)


def test_upper_median_and_percentiles_without_interpolation() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 3.0  # upper median
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0
    ten = [float(x) for x in range(10, 110, 10)]  # 10..100
    assert percentile(ten, 0.9) == 100.0  # index 9
    assert percentile(ten, 0.5) == 60.0  # index 5
    assert percentile(ten, 0.99) == 100.0


def test_reports_label_both_kinds(two_client_files: list[Path]) -> None:
    results = analyze_files(two_client_files)
    text = to_text(results)
    assert "Warp analysis (1 s buckets, first and last 2 s dropped, 4 bucket(s)" in text
    assert "Whole run, exact" in text and "verification failures: 1" in text
    assert '"median_bps": 1700.0' in to_json(results)
    header, row = to_csv(results).splitlines()
    values = dict(zip(header.split(","), row.split(","), strict=True))
    assert float(values["median_bps"]) == 1700.0 and values["errors"] == "2"


def test_analyze_command(two_client_files: list[Path], capsys: pytest.CaptureFixture[str],
                         ) -> None:
    from s3kv.cli import main

    assert main(["analyze", "--json", *map(str, two_client_files)]) == 1  # records hold errors
    assert '"fastest_bps": 4000.0' in capsys.readouterr().out


def test_files_of_separate_runs_with_one_client_id_count_as_separate_clients(
        tmp_path: Path) -> None:
    """Two `s3kv bench` runs (two hosts, say) both record as client c1, threads 0 and 1: analysed
    together they are two clients and four threads, not one client with two."""
    paths = [tmp_path / "host1.csv.zst", tmp_path / "host2.csv.zst"]
    for p in paths:
        write_records(p, [Record(op="PUT", thread=t, client_id="c1", endpoint="http://e1",
                                 file=f"k{t}", size=100, start_ns=T + t * S,
                                 end_ns=T + (t + 1) * S) for t in (0, 1)])
    [a] = analyze_files(paths)
    assert (a.ops, a.clients, a.threads) == (4, 2, 4)
    [one] = analyze_files(paths[:1])
    assert (one.clients, one.threads) == (1, 2)
