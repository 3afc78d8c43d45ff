"""A real S3 server process (moto's standalone server) on a free loopback port.

moto keeps request bodies alive until a full garbage collection, so the server runs through
``warp._motoserver``, which collects every second (DESIGN.md, "Testing").

Tests talk to it over HTTP exactly as production talks to MinIO. It can be stopped and started
again on the same port (an outage; moto then comes back empty) and paused with SIGSTOP (a hung
server that accepts connections but never answers).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from s3kv.procs import module_argv

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    def __init__(self, port: int | None = None) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        env = dict(os.environ)
        env.setdefault("TMPDIR", tempfile.gettempdir())
        # the same launcher `s3kv sweep` uses: moto with a periodic gc.collect()
        self.proc = subprocess.Popen(
            module_argv("warp._motoserver", self.host, str(self.port)),
            stdout=self._log, stderr=subprocess.STDOUT, env=env,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited early; see {self._log.name}")
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1):
                    return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.1)
        raise RuntimeError(f"moto server did not start within {timeout}s; see {self._log.name}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def rss_bytes(self) -> int:
        if self.proc is None:
            return 0
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0
