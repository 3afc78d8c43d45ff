"""A real gateway process (``python -m s3kv.cli serve``) on a real S3 server, and clients for it.

The gateway runs as a subprocess, as in production: tests reach it only over HTTP, can kill it
(SIGKILL, SIGTERM), restart it on the same store and read its memory from /proc. Whoever starts a
Gateway stops it (``cleanup()``), also when a test fails. Shared by tests/gateway and
tests/reliability.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from s3kv.client import S3KVClient
from tests.conftest import make_s3_client
from tests.support.rgw import RGWCluster
from tests.support.s3server import REGION, MotoServer, free_port

GW_ACCESS = "s3kvgatewaytest"
GW_SECRET = "gw/secret+key0123456789"
TOKEN = f"{GW_ACCESS}:{GW_SECRET}"
#: small segments for moto (parts >= 5 MiB); the write path seals within half a second
SMALL = ["--segment-size", "10MiB", "--part-size", "5MiB", "--max-block-size", "5MiB",
         "--seal-after", "0.5", "--sync-interval", "0"]
MAX_BLOCK = 5 * 1024 * 1024
#: segments large enough for two-part multipart objects (parts >= 5 MiB): blocks up to 16 MiB
MULTIPART = ["--segment-size", "32MiB", "--part-size", "8MiB", "--max-block-size", "16MiB",
             "--seal-after", "0.5", "--sync-interval", "0"]
#: the module gateway also answers virtual-hosted-style requests (Host: BUCKET.DOMAIN)
DOMAIN = "s3.localtest"
ROOT = Path(__file__).resolve().parents[2]


class Gateway:
    """One ``s3kv serve`` subprocess on a loopback port; restartable on the same store."""

    def __init__(self, store: str, args: list[str], *, credentials: bool = True,
                 log_format: str = "json", log_level: str = "debug",
                 user: tuple[int, int] | None = None, host: str = "127.0.0.1",
                 port: int | None = None, prefix: tuple[str, ...] = ()) -> None:
        """``user``: (uid, gid) to run the gateway as (root starts it through ``setpriv``);
        ``host``: the loopback address to listen on (any of 127.0.0.0/8), ``port`` a given one;
        ``prefix``: a command that execs the gateway's (``prlimit ... --``)."""
        self.host = host
        self.store = store
        self.user = user
        self.args = list(args)
        self.credentials = credentials
        self.log_format = log_format
        self.log_level = log_level
        self.port = port or free_port()
        self.prefix = list(prefix)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="gateway-", suffix=".log",  # noqa: SIM115
                                                delete=False)
        self.log_path = self._log.name

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> None:
        env = dict(os.environ)
        env.pop("S3KV_ACCESS_KEY", None)
        env.pop("S3KV_SECRET_KEY", None)
        if self.credentials:
            env["S3KV_ACCESS_KEY"] = GW_ACCESS
            env["S3KV_SECRET_KEY"] = GW_SECRET
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        argv = [sys.executable, "-m", "s3kv.cli", "serve", "--listen", f"{self.host}:{self.port}",
                "--store", self.store, "--log-format", self.log_format,
                "--log-level", self.log_level, *self.args]
        if self.user is not None:
            # util-linux setpriv drops to the user and execs the gateway. It keeps one
            # capability, CAP_DAC_READ_SEARCH, so that it can read the interpreter and the
            # sources wherever they are (a venv under /root, 0700); it grants nothing for writes,
            # which is what tests of an unwritable store need
            uid, gid = self.user
            argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                    "--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search",
                    *argv]
        argv = [*self.prefix, *argv]
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=tempfile.gettempdir())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited at start ({self.proc.returncode}):\n"
                                   f"{self.log_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.endpoint + "/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"gateway did not answer within {timeout}s:\n{self.log_text()[-3000:]}")

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait: the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL (kill -9) and reap."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.terminate(timeout=30)
        self.kill()

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def log_text(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def cleanup(self) -> None:
        self.stop()
        self._log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)


def backend_store(server: MotoServer | RGWCluster, bucket: str | None = None) -> str:
    """A fresh backend bucket on ``server`` and the s3:// store URL naming it."""
    bucket = bucket or f"gw-{uuid.uuid4().hex[:12]}"
    make_s3_client(server.endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/kv?endpoint={server.endpoint}"


@contextlib.contextmanager
def running_gateways(store: str, args: list[list[str]], **kw: Any) -> Iterator[list[Gateway]]:
    """Replicas on one store, one gateway per argument list; every one stopped at the end."""
    gws = [Gateway(store, a, **kw) for a in args]
    try:
        for gw in gws:
            gw.start()
        yield gws
    finally:
        for gw in gws:
            gw.cleanup()


@contextlib.contextmanager
def running_gateway(store: str, args: list[str], **kw: Any) -> Iterator[Gateway]:
    with running_gateways(store, [args], **kw) as (gw,):
        yield gw


def gateway_client(endpoint: str, *, secret: str = GW_SECRET, **config: Any) -> Any:
    """boto3 S3 client signing with the gateway's front credentials (SigV4, path-style)."""
    s3cfg: dict[str, Any] = {"addressing_style": "path"}
    s3cfg.update(config.pop("s3", {}))
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name=REGION,
        aws_access_key_id=GW_ACCESS, aws_secret_access_key=secret,
        config=Config(signature_version="s3v4", retries={"max_attempts": 1}, s3=s3cfg,
                      **config))


def store_stats(endpoint: str, *, flush: bool = False) -> dict[str, Any]:
    """The gateway's store counters (``/v1/stats``), after sealing what is open if ``flush``
    (its blocks are then read from the backend)."""

    async def run() -> dict[str, Any]:
        async with S3KVClient(endpoint, token=TOKEN) as kv:
            if flush:
                await kv.flush()
            return await kv.stats()
    return asyncio.run(run())


def metric(endpoint: str, name: str) -> float:
    """A metric of the gateway's ``/metrics`` (the sum of its series: 0 if it has none)."""
    with urllib.request.urlopen(f"{endpoint}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.split("{")[0].split(" ")[0] == name)
