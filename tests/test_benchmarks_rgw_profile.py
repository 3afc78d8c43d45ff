"""benchmarks/rgw_profile.py's reading of ``perf script``: samples parsed into (thread, process,
library, function), an address perf could not name placed inside its library, a stripped
library's addresses named by the nearest exported function below them, each process's samples
as shares of its own, and the flags checked before any server starts."""

from __future__ import annotations

import shutil
import uuid

import psutil
import pytest

from benchmarks.harness import BenchServer, CPUMeter
from benchmarks.rgw_profile import (
    Sample,
    daemon_profile,
    exported_symbols,
    main,
    name_addresses,
    parse_script,
    profile,
    s3_client,
)
from tests.support.benchmarks import run_json
from tests.support.rgw import RGWCluster

CRYPTO = "/usr/lib/x86_64-linux-gnu/libcrypto.so.3"
SCRIPT = f"""\
         radosgw 20012      7fdbf9a41460 [unknown] ({CRYPTO})
   msgr-worker-2 20012  ffffffff81ba36e0 _copy_from_iter ([kernel.kallsyms])
       tp_osd_tp 19362      55d0c0ffee00 crc32_iscsi_00 (/usr/bin/ceph-osd)
       tp_osd_tp 19362      55d0c0ffee00 rocksdb::Foo<Bar const&>::baz ( x) (/usr/bin/ceph-osd)
   a thread name 19362  ffffffff81ba36e0 _copy_from_iter ([kernel.kallsyms])
         radosgw 20012      7fdbf0000000 [unknown] (/usr/lib/elsewhere.so)
not a sample line
"""
#: radosgw's libcrypto mapped at 0x7fdbf9900000 from file offset 0x100000
MAPS = {20012: [(0x7fdbf9800000, 0x7fdbf9900000, 0, CRYPTO),
                (0x7fdbf9900000, 0x7fdbf9b00000, 0x100000, CRYPTO)]}


def test_script_lines_are_parsed_and_unnamed_addresses_placed_in_their_library() -> None:
    samples = parse_script(SCRIPT, MAPS)
    assert samples == [
        Sample("radosgw", 20012, "libcrypto.so.3", "0x0000000000241460"),
        Sample("msgr-worker-2", 20012, "[kernel.kallsyms]", "_copy_from_iter"),
        Sample("tp_osd_tp", 19362, "ceph-osd", "crc32_iscsi_00"),
        Sample("tp_osd_tp", 19362, "ceph-osd", "rocksdb::Foo<Bar const&>::baz ( x)"),
        Sample("a thread name", 19362, "[kernel.kallsyms]", "_copy_from_iter"),
        Sample("radosgw", 20012, "elsewhere.so", "[unknown]"),  # no mapping known for it
    ]


def test_raw_addresses_are_named_by_the_exported_function_below_them() -> None:
    rows = [(12.5, "libcrypto.so.3", "0x0000000000241460"),
            (10.0, "libcrypto.so.3", "0x0000000000240d17"),
            (4.28, "[kernel.kallsyms]", "_copy_from_iter"),
            (0.5, "libcrypto.so.3", "0x0000000000000010")]
    symbols = {"libcrypto.so.3": [(0x240000, "MD4_Final"), (0x241400, "MD5_Init")]}
    named = name_addresses(rows, symbols)
    assert named[("libcrypto.so.3", "MD4_Final+")] == pytest.approx(10.0)
    assert named[("libcrypto.so.3", "MD5_Init+")] == pytest.approx(12.5)
    assert named[("libcrypto.so.3", "0x0000000000000010")] == pytest.approx(0.5)  # below all
    assert named[("[kernel.kallsyms]", "_copy_from_iter")] == pytest.approx(4.28)


def test_a_process_is_profiled_as_shares_of_its_own_samples() -> None:
    samples = ([Sample("tp_osd_tp", 2, "ceph-osd", "crc32_iscsi_00")] * 5
               + [Sample("msgr-worker-2", 2, "[kernel.kallsyms]", "_copy_from_iter")] * 3
               + [Sample("msgr-worker-0", 2, "[kernel.kallsyms]", "_copy_from_iter")] * 2
               + [Sample("radosgw", 1, "libcrypto.so.3", "0x0000000000241460")] * 40)
    osd = daemon_profile(samples, 2, {})
    assert osd["samples"] == 10
    assert osd["by_thread"] == {"tp_osd_tp": 50.0, "msgr-worker-*": 50.0}
    assert osd["by_library"] == {"ceph-osd": 50.0, "[kernel.kallsyms]": 50.0}
    assert osd["top_functions"] == [[50.0, "ceph-osd crc32_iscsi_00"],
                                    [50.0, "[kernel.kallsyms] _copy_from_iter"]]
    assert daemon_profile(samples, 3, {}) == {}


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
    for daemon, name in (("radosgw", "rgw"), ("osd", "osd")):
        assert out[f"{daemon}_top_functions"], daemon
        # every thread's samples count (perf samples at 499 Hz of CPU time): attached to radosgw
        # (-p), perf missed a quarter to half of its CPU; perf report's --pid dropped more
        cpu_s = out["cpu_s_per_GiB"][name] * out["GiB"]
        assert 0.8 * 499 * cpu_s <= out[f"{daemon}_samples"] <= 1.4 * 499 * cpu_s, daemon
        assert 90 <= sum(out[f"{daemon}_by_library"].values()) <= 100.5, daemon
        assert 90 <= sum(out[f"{daemon}_by_thread"].values()) <= 100.5, daemon
    assert "tp_osd_tp" in out["osd_by_thread"]
    assert not any(name.startswith("tp_osd") for name in out["radosgw_by_thread"])
