"""benchmarks/rgw_profile.py's reading of ``perf report``: lines parsed into (percent, library,
symbol), a stripped library's raw addresses named by the nearest exported function below them,
and the flags checked before any server starts."""

from __future__ import annotations

import shutil
import uuid

import psutil
import pytest

from benchmarks.harness import BenchServer, CPUMeter
from benchmarks.rgw_profile import (
    exported_symbols,
    main,
    name_addresses,
    parse_report,
    profile,
    s3_client,
    threads_of,
)
from tests.support.benchmarks import run_json
from tests.support.rgw import RGWCluster

REPORT = """\
# Samples: 6K of event 'cpu-clock:pppH'
#
# Overhead  Shared Object      Symbol
# ........  .................  ......
#
    12.50%  libcrypto.so.3     [.] 0x0000000000241460
    10.00%  libcrypto.so.3     [.] 0x0000000000240d17
     4.28%  [kernel.kallsyms]  [k] _copy_from_iter
     3.24%  libceph-common.so.2  [.] crc32_iscsi_00
     0.50%  libcrypto.so.3     [.] 0x0000000000000010
"""


def test_report_lines_are_parsed() -> None:
    rows = parse_report(REPORT)
    assert rows[0] == (12.5, "libcrypto.so.3", "0x0000000000241460")
    assert (4.28, "[kernel.kallsyms]", "_copy_from_iter") in rows
    assert (3.24, "libceph-common.so.2", "crc32_iscsi_00") in rows
    assert len(rows) == 5


def test_raw_addresses_are_named_by_the_exported_function_below_them() -> None:
    symbols = {"libcrypto.so.3": [(0x240000, "MD4_Final"), (0x241400, "MD5_Init")]}
    named = name_addresses(parse_report(REPORT), symbols)
    assert named[("libcrypto.so.3", "MD4_Final+")] == pytest.approx(10.0)
    assert named[("libcrypto.so.3", "MD5_Init+")] == pytest.approx(12.5)
    assert named[("libcrypto.so.3", "0x0000000000000010")] == pytest.approx(0.5)  # below all
    assert named[("[kernel.kallsyms]", "_copy_from_iter")] == pytest.approx(4.28)


THREADS = """\
# Samples: 2K of event 'cpu-clock:pppH'
#
# Overhead  Command
# ........  .............
#
    40.10%  tp_osd_tp
    30.00%  msgr-worker-2
    20.00%  msgr-worker-0
     9.90%  bstore_aio
"""


def test_threads_are_summed_by_name_without_their_number() -> None:
    assert threads_of(THREADS) == {"msgr-worker-*": 50.0, "tp_osd_tp": 40.1, "bstore_aio": 9.9}
    assert threads_of("") == {}


def test_exported_symbols_of_a_real_library_and_of_none() -> None:
    import _ssl  # an extension module: a shared library exporting its init function

    syms = exported_symbols(_ssl.__file__)
    assert "PyInit__ssl" in {name for _, name in syms}
    assert syms == sorted(syms)
    assert exported_symbols("/nonexistent/lib.so") == []


def test_an_unknown_load_is_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    with pytest.raises(SystemExit):
        main(["--loads", "put-1KiB"])
    assert "unknown load 'put-1KiB'" in capsys.readouterr().err


def test_a_load_runs_and_is_costed_on_moto() -> None:
    """End to end on moto (one process, no radosgw to sample): the load moves bytes and each
    server process's CPU per GiB is reported; no profile without a radosgw."""
    doc = run_json("rgw_profile.py", "--server", "moto", "--loads", "put-256KiB",
                   "--seconds", "1", timeout=120)
    assert doc["server"].startswith("moto") and doc["split_cores"] is False
    load = doc["put-256KiB"]
    assert load["GiB"] > 0
    assert set(load["cpu_s_per_GiB"]) == {  # the server's, and the machine's per CPU
        "server", "machine", "interrupts", "steal", "other",
        *(f"cpu{i}" for i in range(psutil.cpu_count()))}
    assert load["cpu_s_per_GiB"]["server"] > 0
    assert "radosgw_top_functions" not in load


@pytest.mark.rgw
def test_radosgw_and_the_osd_are_profiled_on_rgw(rgw_server: RGWCluster) -> None:
    """On the session's RGW: a ranged-GET load costs each daemon and profiles both radosgw and
    the OSD, each as shares of its own samples; the OSD's op threads are named."""
    if shutil.which("perf") is None:
        pytest.fail("perf is not installed: apt-get install linux-perf (see .ci/run)")
    server = BenchServer(rgw_server.endpoint, "rgw", rgw_server.access_key,
                         rgw_server.secret_key, data_dir=str(rgw_server.dir),
                         pids=tuple(rgw_server.pids().values()))
    meter = CPUMeter.for_run(server)
    bucket = f"profile-{uuid.uuid4().hex[:8]}"
    s3_client(server).create_bucket(Bucket=bucket)
    segments: list[str] = []
    profile(server, "put-parts-64MiB", 1.0, segments, bucket, meter)
    assert segments
    out = profile(server, "get-range-32MiB", 2.0, segments, bucket, meter)
    assert out["GiB"] > 0 and out["cpu_s_per_GiB"]["osd"] > 0
    for daemon in ("radosgw", "osd"):
        assert out[f"{daemon}_top_functions"], daemon
        assert 90 <= sum(out[f"{daemon}_by_library"].values()) <= 100.5, daemon
        assert 90 <= sum(out[f"{daemon}_by_thread"].values()) <= 100.5, daemon
    assert "tp_osd_tp" in out["osd_by_thread"]
    assert not any(name.startswith("tp_osd") for name in out["radosgw_by_thread"])
