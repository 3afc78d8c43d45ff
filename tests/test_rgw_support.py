"""tests/support/rgw.py, the Ceph RGW launcher the ``rgw`` tier and the benchmarks share."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.conftest import make_s3_client
from tests.support.rgw import INSTALL_HINT, RGWCluster, RGWError


def test_missing_ceph_programs_fail_with_the_install_line(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    """Without the Debian packages start() raises (never a silent skip) and says what to
    install; nothing is left running and its directory is removed."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no ceph-* programs here
    cluster = RGWCluster(str(tmp_path))
    with pytest.raises(RGWError) as err:
        cluster.start()
    assert INSTALL_HINT in str(err.value)
    assert "radosgw" in str(err.value)
    assert cluster.procs == {}
    assert not cluster.dir.exists()


@pytest.mark.rgw
def test_rgw_restart_keeps_data_and_only_its_daemons_run(rgw_server: RGWCluster) -> None:
    s3 = make_s3_client(rgw_server.endpoint)
    bucket = f"keep-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    body = os.urandom(300_000)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    # RGW's answers as the issue lists them: ETag = MD5 of the body
    import hashlib

    assert s3.head_object(Bucket=bucket, Key="k")["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    before = rgw_server.pids()
    assert set(before) == {"mon", "osd", "rgw"}
    rgw_server.restart_gateway()
    after = rgw_server.pids()
    assert after["mon"] == before["mon"] and after["osd"] == before["osd"]
    assert after["rgw"] != before["rgw"]
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == body
    for pid in after.values():  # each daemon runs from this cluster's own config
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert str(rgw_server.conf).encode() in cmdline
