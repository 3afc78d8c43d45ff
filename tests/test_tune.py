"""``s3kv tune``: the recommendation rule, and a run against the real S3 server whose
recommendation must follow from its own table; ``--write-config`` loads with Settings."""

from __future__ import annotations

import http.client
import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from s3kv.cli import main
from s3kv.config import Settings
from s3kv.sizes import MiB
from s3kv.tuning import Row, gateway_settings, recommend
from tests.support.s3server import MotoServer


def _row(seg: int, part: int, conc: int, put: float, get: float, ttfb99: float) -> Row:
    return Row(seg * MiB, part * MiB, conc, put_bps=put * MiB, get_bps=get * MiB,
               ttfb_p99_ms=ttfb99, objects=1, gets=1)


def test_rule_picks_smallest_layout_within_tolerance_and_ttfb_bound() -> None:
    rows = [
        _row(16, 8, 4, put=90, get=100, ttfb99=10),   # score 0.9: out (below 95 %)
        _row(64, 16, 4, put=97, get=99, ttfb99=12),   # score 0.97: eligible
        _row(64, 16, 1, put=96, get=100, ttfb99=11),  # 0.96: eligible, lower concurrency
        _row(256, 16, 4, put=100, get=98, ttfb99=14),  # 0.98: eligible, larger segment
        _row(32, 8, 4, put=100, get=100, ttfb99=45),  # best score, TTFB above the bound
    ]
    rec = recommend(rows)
    assert rec.ttfb_bound_ms == 20.0  # max(2 x 10, 10 + 10)
    assert rec.row is rows[2]
    assert set(rec.eligible) == {rows[1].key(), rows[2].key(), rows[3].key()}
    assert "5%" in rec.reason
    skipped = Row(16 * MiB, 8 * MiB, 1, skipped="budget spent")
    assert recommend([skipped]).row is None


def test_gateway_settings_keep_max_block_size_valid() -> None:
    s = gateway_settings(_row(16, 8, 4, 1, 1, 1))
    assert s == {"segment_size": "16MiB", "part_size": "8MiB", "max_parts_in_flight": 4,
                 "max_block_size": "8MiB"}
    assert "max_block_size" not in gateway_settings(_row(256, 16, 4, 1, 1, 1))


def _recheck(doc: dict[str, Any]) -> None:
    """The recommended row satisfies the stated rule against every other row of the table."""
    rule = doc["rule"]
    rows = [r for r in doc["rows"] if not r["skipped"] and r["objects"] and r["gets"]]
    assert rows
    best_put = max(r["put_bps"] for r in rows)
    best_get = max(r["get_bps"] for r in rows)
    score = {id(r): min(r["put_bps"] / best_put, r["get_bps"] / best_get) for r in rows}
    low = min(r["ttfb_p99_ms"] for r in rows)
    bound = max(rule["ttfb_factor"] * low, low + rule["ttfb_slack_ms"])
    assert rule["ttfb_bound_ms"] == pytest.approx(bound)
    bounded = [r for r in rows if r["ttfb_p99_ms"] <= bound]
    top = max(score[id(r)] for r in bounded)
    eligible = [r for r in bounded if score[id(r)] >= (1 - rule["tolerance"]) * top]
    rec = doc["recommended"]
    pick = min(eligible, key=lambda r: (r["segment_size"], r["concurrency"], -r["part_size"]))
    assert (pick["segment_size"], pick["part_size"], pick["concurrency"]) == (
        rec["segment_size"], rec["part_size"], rec["concurrency"])
    assert rec["ttfb_p99_ms"] <= bound
    assert rec["score"] == pytest.approx(score[id(pick)])


def test_tune_against_s3_server(s3_server: MotoServer, bucket: str, s3_client: Any,
                                tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gateway.toml"
    code = main(["tune", "--endpoint", s3_server.endpoint, "--bucket", bucket, "--budget", "8",
                 "--segment-sizes", "5MiB,10MiB", "--part-sizes", "5MiB",
                 "--concurrency", "1,2", "--block-size", "256KiB", "--json",
                 "--write-config", str(config)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    measured = [r for r in doc["rows"] if not r["skipped"]]
    assert len(measured) >= 2
    for r in measured:
        assert r["put_bps"] > 0 and r["get_bps"] > 0 and r["errors"] == 0
        assert r["ttfb_p50_ms"] <= r["ttfb_p99_ms"]
    _recheck(doc)
    rec = doc["recommended"]
    settings = Settings.load(config_file=config, env={})
    assert settings.segment_size == rec["segment_size"]
    assert settings.part_size == rec["part_size"]
    assert settings.max_parts_in_flight == rec["concurrency"]
    assert settings.max_block_size <= settings.segment_size // 2
    # everything it wrote is gone
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    uploads = s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert uploads == []


@pytest.mark.parametrize("flags,message", [
    (["--tolerance", "-0.1"], "--tolerance must be at least 0 and below 1"),
    (["--tolerance", "nan"], "--tolerance must be at least 0 and below 1"),
    (["--ttfb-factor", "0.5", "--ttfb-slack-ms", "-20"], "--ttfb-factor must be at least 1"),
    (["--ttfb-slack-ms", "-20"], "--ttfb-slack-ms must be at least 0"),
])
def test_rule_flags_out_of_range_are_refused_before_the_run(
        flags: list[str], message: str, s3_server: MotoServer, s3_client: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before, the rule's flags were taken as they came and a whole run was measured first:
    with a negative or NaN --tolerance, or a TTFB bound under the lowest TTFB (--ttfb-factor
    0.5 --ttfb-slack-ms -20), no layout was eligible and `recommend` died on min() of nothing
    (ValueError, a traceback after the run); a negative --ttfb-slack-ms alone ran and was
    silently meaningless. Now each is refused first (exit 2): nothing is written."""
    argv = ["tune", "--endpoint", s3_server.endpoint, "--bucket", "tune-refused", "--budget", "3",
            "--segment-sizes", "5MiB", "--part-sizes", "5MiB", "--concurrency", "1",
            "--block-size", "256KiB", "--json", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("s3kv tune: error:") and message in err, err
    names = [b["Name"] for b in s3_client.list_buckets()["Buckets"]]
    assert "tune-refused" not in names  # refused before the bucket was created


class _PartCounter(http.server.BaseHTTPRequestHandler):
    """A pass-through HTTP proxy to the S3 server that counts UploadPart requests in flight
    (each held 0.3 s before it is forwarded, so that those sent together overlap)."""

    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int] = ("127.0.0.1", 0)
    lock = threading.Lock()
    now = 0
    peak = 0

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        part = self.command == "PUT" and "partNumber=" in self.path
        if part:
            with self.lock:
                type(self).now += 1
                type(self).peak = max(type(self).peak, type(self).now)
            time.sleep(0.3)
        try:
            conn = http.client.HTTPConnection(*self.upstream, timeout=60)
            conn.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
        finally:
            if part:
                with self.lock:
                    type(self).now -= 1
        self.send_response(resp.status)
        for name, value in resp.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    def log_message(self, *args: Any) -> None:
        pass


def test_put_phase_keeps_c_parts_in_flight_in_total(s3_server: MotoServer, bucket: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The PUT phase has C part uploads in flight in total (the setting it recommends,
    max_parts_in_flight, is that total). Before, objects of fewer parts than C ran
    ceil(C / parts) uploads of min(parts, C) parts each: 15 MiB objects of 5 MiB parts at
    C = 4 were 2 uploads x 3 = 6 parts in flight, measured at 6 and recommended as 4. Counted
    by a proxy in front of the real S3 server."""
    host, port = s3_server.endpoint.split("//")[1].split(":")
    _PartCounter.upstream = (host, int(port))
    _PartCounter.now = _PartCounter.peak = 0
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PartCounter)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        code = main(["tune", "--endpoint", f"http://127.0.0.1:{proxy.server_port}",
                     "--bucket", bucket, "--budget", "3", "--segment-sizes", "15MiB",
                     "--part-sizes", "5MiB", "--concurrency", "4", "--block-size", "1MiB",
                     "--json"])
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join()
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert doc["recommended"]["concurrency"] == 4
    assert _PartCounter.peak == 4
