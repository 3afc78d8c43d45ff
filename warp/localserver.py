"""A local S3 server on loopback for runs without ``--endpoint``.

For now this is moto's standalone server (a faithful S3 implementation installable from PyPI),
run by :mod:`warp._motoserver`; ``LocalS3Server(argv=...)`` takes any command that serves S3 on
``{host}:{port}``, so it can be pointed at ``s3kv serve`` later without changing callers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from s3kv.errors import ConfigError
from s3kv.procs import module_argv

LOCAL_ACCESS_KEY = "s3kv-local"
LOCAL_SECRET_KEY = "s3kv-local-secret"


def moto_argv(host: str, port: int) -> list[str]:
    return module_argv("warp._motoserver", host, str(port))


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class LocalS3Server:
    def __init__(self, argv: Sequence[str] | None = None, host: str = "127.0.0.1",
                 port: int = 0, health_path: str = "/") -> None:
        self.host = host
        self.port = port or _free_port(host)
        self._argv = list(argv) if argv else moto_argv(self.host, self.port)
        self._health = health_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """Where it serves once started (known before: a run's settings are checked with it)."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> str:
        self._log = tempfile.NamedTemporaryFile(prefix="s3kv-local-s3-", suffix=".log",  # noqa: SIM115
                                                delete=False)
        # The local server accepts any credentials; give clients some if the user has none.
        os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY)
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_KEY)
        self._proc = subprocess.Popen(self._argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      start_new_session=True)  # Ctrl-C is ours to handle
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ConfigError(f"local S3 server exited at start; see {self._log.name}")
            try:
                with urllib.request.urlopen(self.endpoint + self._health, timeout=1):
                    return self.endpoint
            except urllib.error.HTTPError:
                return self.endpoint  # it answers
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.stop(keep_log=True)  # the error sends the user to it
        raise ConfigError(f"local S3 server did not start in {timeout:.0f}s; see {self._log.name}")

    def stop(self, keep_log: bool = False) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        self._log.close()
        if not keep_log:
            os.unlink(self._log.name)

    def __enter__(self) -> LocalS3Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
