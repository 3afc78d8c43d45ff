from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from s3kv import __version__
from s3kv.config import Settings
from s3kv.errors import ConfigError
from s3kv.gateway.memlimit import check_memory
from s3kv.gateway.server import check_settings
from s3kv.sizes import GiB, KiB, MiB, format_size, parse_size


@pytest.mark.parametrize("text,expected", [
    ("256MiB", 256 * MiB), ("16MiB", 16 * MiB), ("1GiB", GiB), ("4096", 4096),
    ("4KiB", 4 * KiB), ("10GB", 10 * 1000**3), ("1.5GiB", 3 * GiB // 2), ("16 mib", 16 * MiB),
])
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "MiB", "12XB", "-1", "1.3B", "1e3"])
def test_parse_size_rejects(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_size(bad)


def test_format_size() -> None:
    assert format_size(256 * MiB) == "256MiB"
    assert format_size(1536) == "1.50KiB"
    assert format_size(12) == "12B"


def test_settings_precedence(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "s3kv.toml"
    cfg.write_text('segment_size = "128MiB"\npart_size = "8MiB"\nseal_after = 2\n')
    env = {"S3KV_SEAL_AFTER": "3.5", "S3KV_PART_SIZE": "16MiB"}
    s = Settings.load({"seal_after": "1.25"}, env=env, config_file=cfg)
    assert s.segment_size == 128 * MiB  # file
    assert s.part_size == 16 * MiB  # env beats file
    assert s.seal_after == 1.25  # flag beats env


def test_settings_validation() -> None:
    with pytest.raises(ConfigError, match="multiple of part_size"):
        Settings.load({"segment_size": "100MiB", "part_size": "16MiB"}, env={})
    with pytest.raises(ConfigError, match="not one of"):
        Settings.load({"log_format": "xml"}, env={})
    with pytest.raises(ConfigError, match="invalid size"):
        Settings.load(env={"S3KV_CAPACITY": "lots"})
    # the read memory holds the largest block and a walk's four read-ahead windows
    with pytest.raises(ConfigError, match="at least 1GiB"):
        Settings.load({"read_ahead": "256MiB"}, env={})
    with pytest.raises(ConfigError, match="at least 64MiB"):
        Settings.load({"max_read_memory": "32MiB", "read_ahead": "0"}, env={})
    with pytest.raises(ConfigError, match="idle_timeout"):
        Settings.load({"idle_timeout": "0"}, env={})
    # direct reads: 0 (off) up to the 7 days a presigned URL may live
    assert Settings.load(env={}).direct_reads == 0
    assert Settings.load({"direct_reads": "604800"}, env={}).direct_reads == 604800
    for bad in ("-1", "604801"):
        with pytest.raises(ConfigError, match="direct_reads"):
            Settings.load({"direct_reads": bad}, env={})


def test_settings_a_gateway_could_not_serve_with_are_refused(tmp_path: Path) -> None:
    """A segment of 0 bytes, a request memory smaller than one block (every larger write was
    503 SlowDown for ever, CreateBucket too), parts below S3's 5 MiB minimum on an S3 store
    (every segment upload failed at its completion), and settings that let the gateway hold
    more memory than the machine has: each started before, and is refused now."""
    with pytest.raises(ConfigError, match="segment_size must be positive"):
        Settings.load({"segment_size": "0"}, env={})
    with pytest.raises(ConfigError, match=r"at most 4GiB \(the index keeps 32-bit offsets"):
        Settings.load({"segment_size": "8GiB"}, env={})  # offsets past 4 GiB would wrap
    assert Settings.load({"segment_size": "4GiB"}, env={}).segment_size == 4 * GiB
    with pytest.raises(ConfigError, match=r"max_request_memory \(1KiB\) must hold the largest "
                                          r"block, max_block_size \(64MiB\)"):
        Settings.load({"max_request_memory": "1KiB"}, env={})
    s3 = {"store": "s3://b/p?endpoint=http://127.0.0.1:1", "segment_size": "4MiB"}
    with pytest.raises(ConfigError, match=r"below S3's 5MiB minimum part"):
        check_settings(Settings.load({**s3, "part_size": "1MiB", "max_block_size": "1MiB"},
                                     env={}))
    check_settings(Settings.load({**s3, "part_size": "4MiB"}, env={}))  # one PUT a segment
    check_settings(Settings.load({"part_size": "1MiB", "max_block_size": "1MiB"}, env={}))
    held = Settings.load({"dram_cache": "1GiB"}, env={}).held_memory
    assert held == 1024 * MiB + 512 * MiB + 512 * MiB + 2 * 256 * MiB
    with pytest.raises(ConfigError, match=r"hold 2.50GiB, more than the 2GiB of memory"):
        check_memory(Settings.load({"dram_cache": "1GiB"}, env={}), limit=2048 * MiB)
    check_memory(Settings.load({"dram_cache": "1GiB"}, env={}), limit=4096 * MiB)
    # and against this machine's own memory, as `s3kv serve` checks it
    proc = subprocess.run([sys.executable, "-m", "s3kv.cli", "serve", "--store",
                           f"file://{tmp_path}/data", "--listen", "127.0.0.1:1",
                           "--dram-cache", "100TiB"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "of memory it may use" in proc.stderr and "--dram-cache 100TiB" in proc.stderr
    assert not (tmp_path / "data").exists()


def test_a_config_file_value_of_another_type_or_out_of_range_is_named(tmp_path: Path) -> None:
    """A TOML list for a size was a TypeError traceback; true for seconds, and seconds that are
    negative, infinite or NaN (from a file, the environment or a flag), started a gateway."""
    for text, message in (("segment_size = [1, 2]", "segment_size: [1, 2] is no size"),
                          ("seal_after = true", "seal_after: True is no float"),
                          ("node_id = 7", "node_id: 7 is no str"),
                          ("seal_after = inf", "seal_after must be a finite number"),
                          ("seal_after = nan", "seal_after must be a finite number")):
        path = tmp_path / "s3kv.toml"
        path.write_text(text + "\n")
        with pytest.raises(ConfigError, match=re.escape(message)):
            Settings.load(config_file=path, env={})
    for name, value in (("sync_interval", "-5"), ("read_stall", "nan"), ("ttl", "inf"),
                        ("backend_timeout", "-1")):
        with pytest.raises(ConfigError, match=f"{name} must be a finite number, 0 or more"):
            Settings.load({name: value}, env={})
        with pytest.raises(ConfigError, match=f"{name} must be a finite number, 0 or more"):
            Settings.load(env={Settings.env_name(name): value})
    with pytest.raises(ConfigError, match="backend_timeout must be positive"):
        Settings.load({"backend_timeout": "0"}, env={})


def test_unknown_s3kv_variables_are_named() -> None:
    """A misspelt S3KV_* variable leaves its setting at the default: `s3kv serve` warns of it
    (config.unknown_env); settings and the variables other parts read are not named."""
    env = {"S3KV_SEAL_AFTR": "3", "S3KV_SEAL_AFTER": "3", "S3KV_CONFIG": "x.toml",
           "S3KV_URL": "http://gw:9470", "S3KV_AGENT_TOKEN": "t", "PATH": "/bin"}
    assert Settings.unknown_env(env) == ["S3KV_SEAL_AFTR"]
    assert Settings.unknown_env({n: "1" for n in Settings.env_names()}) == []


def test_serve_checks_store_and_gateway_settings_at_start(tmp_path: Path) -> None:
    """What config.py cannot check (codecs, credentials files) `s3kv serve` refuses before it
    opens the store or listens, with the setting named."""
    proc = subprocess.run([sys.executable, "-m", "s3kv.cli", "serve", "--store",
                           f"file://{tmp_path}/data", "--listen", "127.0.0.1:1",
                           "--default-codec", "lz4"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stderr
    assert "default_codec: unknown codec 'lz4'" in proc.stderr, proc.stderr
    assert not (tmp_path / "data").exists()
    # the credentials file: the same start-up check (check_settings), in-process
    with pytest.raises(ConfigError, match="cannot read credentials file"):
        check_settings(Settings.load({"credentials_file": str(tmp_path / "absent.toml")},
                                     env={}))


def test_serve_on_a_backend_it_cannot_reach_says_so_and_leaves_nothing_open() -> None:
    """The index cannot be rebuilt: one line naming the backend's error, a non-zero exit, and
    the backend's HTTP session closed (before: "Unclosed client session" on the way out); a
    misspelt S3KV_* variable is warned of first."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y",
               PYTHONWARNINGS="default", S3KV_SEAL_AFTR="3")
    proc = subprocess.run([sys.executable, "-m", "s3kv.cli", "serve", "--listen", "127.0.0.1:1",
                           "--store", "s3://b/p?endpoint=http://127.0.0.1:1"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "s3kv serve: error: LIST p/deleted-namespaces/" in proc.stderr, proc.stderr
    assert "Could not connect" in proc.stderr and "Unclosed" not in proc.stderr, proc.stderr
    # and the misspelt variable, which changed nothing, is named on the way (unknown_env)
    logged = proc.stdout + proc.stderr
    assert "config.unknown_env" in logged and "S3KV_SEAL_AFTR" in logged, logged


def test_max_block_size_follows_the_segment_size(tmp_path: Path) -> None:
    """Unset, --max-block-size is the smaller of 64 MiB and half a segment; an explicit value
    that does not fit is refused with what to change."""
    assert Settings.load(env={}).max_block_size == 64 * MiB
    assert Settings.load({"segment_size": "512MiB"}, env={}).max_block_size == 64 * MiB
    small = {"segment_size": "32MiB", "part_size": "16MiB"}
    assert Settings.load(small, env={}).max_block_size == 16 * MiB
    assert Settings.load({**small, "max_block_size": "8MiB"}, env={}).max_block_size == 8 * MiB
    with pytest.raises(ConfigError, match=r"lower --max-block-size to 16MiB or less .*"
                                          r"raise --segment-size to at least 128MiB"):
        Settings.load({**small, "max_block_size": "64MiB"}, env={})
    shown = subprocess.run([sys.executable, "-m", "s3kv.cli", "serve", "--help"],
                           capture_output=True, text=True, check=True).stdout
    assert "default the smaller of 64MiB and half of segment_size" in " ".join(shown.split())
    # and `s3kv serve --segment-size 32MiB` alone starts (it used to refuse)
    from tests.support.gateway import Gateway

    gw = Gateway(f"file://{tmp_path}/data", ["--segment-size", "32MiB", "--part-size", "16MiB"],
                 credentials=False)
    try:
        gw.start()
    finally:
        gw.stop()


def test_secrets_masked() -> None:
    s = Settings.load({"secret_key": "hunter2"}, env={})
    assert s.public_dict()["secret_key"] == "***"


def test_cli_version_and_help() -> None:
    out = subprocess.run([sys.executable, "-m", "s3kv.cli", "--version"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"s3kv {__version__}"
    helptext = subprocess.run([sys.executable, "-m", "s3kv.cli", "--help"],
                              capture_output=True, text=True, check=True).stdout
    assert "COMMAND" in helptext


def test_log_level_check_follows_configure_logging() -> None:
    """``s3kv.log.enabled`` answers as the configured filter does (the gateway checks it before
    its per-request debug line); before any configuration every level is emitted."""
    import logging

    import structlog
    from structlog.testing import capture_logs

    from s3kv.log import configure_logging, enabled, get_logger

    saved = structlog.get_config()
    try:
        configure_logging("json", "warning")
        assert not enabled(logging.DEBUG) and not enabled(logging.INFO)
        assert enabled(logging.WARNING) and enabled(logging.ERROR)
        configure_logging("json", "debug")
        assert enabled(logging.DEBUG)
        with capture_logs() as captured:
            if enabled(logging.DEBUG):
                get_logger("t").debug("t.line", n=1)
        assert [c["event"] for c in captured] == ["t.line"]
        configure_logging("json", "no-such-level")  # falls back to info, as the filter does
        assert not enabled(logging.DEBUG) and enabled(logging.INFO)
    finally:
        configure_logging("console", "notset")
        structlog.configure(**saved)
    assert enabled(logging.DEBUG)


def test_library_and_asyncio_lines_keep_a_json_log_json(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """The gateway logs JSON lines; a library's stdlib record (aiohttp, botocore) and asyncio's
    unhandled errors came out as plain text, a traceback split over many lines, which a log
    pipeline cannot parse (a soak on Ceph RGW: aiohttp's "Task exception was never retrieved"
    at each radosgw restart). They are lines of the same format now; an unretrieved connection
    reset, which the request that owned the connection already handled, is a debug line."""
    import asyncio
    import gc
    import json
    import logging

    import structlog

    from s3kv.log import configure_logging, loop_exception_handler

    async def fail(exc: BaseException) -> None:
        raise exc

    async def unretrieved() -> None:
        asyncio.get_running_loop().set_exception_handler(loop_exception_handler)
        for exc in (ConnectionResetError("Cannot write to closing transport"),
                    ValueError("boom")):
            task = asyncio.create_task(fail(exc))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            del task
            gc.collect()  # its __del__ reports the exception no one retrieved

    root = logging.getLogger()
    saved = (root.handlers[:], root.level, structlog.get_config())
    try:
        configure_logging("json", "info")
        logging.getLogger("aiohttp.client").warning("retrying %s", "x")
        logging.getLogger("botocore").info("below the libraries' level")
        asyncio.run(unretrieved())
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    finally:
        root.handlers[:], _, config = saved
        root.setLevel(saved[1])
        structlog.configure(**config)
    assert [(x["event"], x["module"], x["level"]) for x in lines] == [
        ("library.log", "aiohttp.client", "warning"), ("asyncio.unhandled", "asyncio", "error")]
    assert lines[0]["message"] == "retrying x"
    assert "ValueError: boom" in lines[1]["exception"]
