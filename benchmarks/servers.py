"""S3 servers for benchmarks: Ceph RGW (Debian), s3rver (npm), moto, or a running endpoint.

    from benchmarks.servers import bench_server

    with bench_server("rgw") as server:  # or "s3rver", "moto", or endpoint="http://host:9000"
        client = session.create_client("s3", **server.client_kwargs())
        ...

``bench_server`` starts the server on a free loopback port, waits until it answers HTTP, yields a
:class:`BenchServer` (URL, credentials, server name) and always stops the process and removes its
data directory, also on errors and Ctrl-C. While the block is active the standard AWS variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``) are set to the
server's credentials, so code that uses the default credential chain (``S3Backend``, boto3)
signs for it; they are restored on exit. For an existing ``endpoint`` the credentials come from
the environment as for any S3 tool, and the environment is left alone.

Why Ceph RGW by default: it is a production S3 server (multi-threaded C++, bucket index and
per-object metadata in RADOS, multipart manifests, so Complete does not copy), which is what
one-object-per-block costs a real store; ``tests/support/rgw.py`` starts it (one mon, one
bluestore OSD over a sparse file, radosgw on a loopback port, one S3 user) in 5-20 s and
:attr:`BenchServer.pids` names its three daemons for CPU accounting. It needs the Debian
packages ``ceph-mon ceph-osd radosgw ceph-common``.

s3rver (DESIGN.md, "Testing") is disk-backed, stays around 100-130 MiB of
memory and serves ranged GETs without reading the whole object, where moto keeps bodies in
memory and reads a whole object per range. moto is the faithful one (real error codes and
part-size rules) and is here for small runs and CI.

s3rver is installed on demand with ``npm install --prefix benchmarks/.node s3rver@3.7.1`` (the
directory is gitignored) and run with ``node``. It accepts AWS Signature V4 without verifying
it (its V4 verification is unimplemented) but looks the access key up in its account registry,
so clients must sign with its built-in key pair ``S3RVER``/``S3RVER``; we also pass
``--allow-mismatched-signatures`` and ``--no-vhost-buckets`` so path-style requests from botocore
are never mistaken for virtual-host ones.

Command line (for a manual session; Ctrl-C stops it)::

    python benchmarks/servers.py --server s3rver
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

if __package__ in (None, ""):  # run as a script: make `tests.support` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.procgroup import exit_on_sigterm, stop_process_group
from tests.support.rgw import RGWCluster, RGWError

HOST = "127.0.0.1"
REGION = "us-east-1"
KINDS = ("rgw", "s3rver", "moto")
DEFAULT_KIND = "rgw"
S3RVER_VERSION = "3.7.1"
S3RVER_ACCESS_KEY = "S3RVER"
S3RVER_SECRET_KEY = "S3RVER"
MOTO_ACCESS_KEY = "testing"
MOTO_SECRET_KEY = "testing"
#: where s3rver is installed (``npm install --prefix``); gitignored
DEFAULT_NODE_DIR = Path(__file__).resolve().parent / ".node"
#: seconds a server gets to exit after SIGTERM before SIGKILL
STOP_GRACE_S = 10.0

# moto keeps request bodies alive until a full GC; collect every 2 s (DESIGN.md, "Testing").
_MOTO_BOOT = """
import gc, sys, threading, time
def _collect():
    while True:
        time.sleep(2.0)
        gc.collect()
threading.Thread(target=_collect, daemon=True).start()
from moto.server import main
main(["-H", sys.argv[1], "-p", sys.argv[2]])
"""


class ServerError(RuntimeError):
    """A benchmark server could not be installed or started."""


@dataclass(frozen=True)
class BenchServer:
    """A running S3 endpoint and how to sign for it."""

    url: str
    kind: str  # "rgw", "s3rver", "moto" or "external"
    access_key: str | None = None  # None: the default credential chain (external endpoints)
    secret_key: str | None = None
    region: str = REGION
    pid: int | None = None  # of the server process we started
    data_dir: str | None = None  # s3rver's on-disk store
    log_path: str | None = None
    #: every process of the server (RGW: radosgw, OSD, mon), for CPU accounting and pinning
    pids: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        """How figures name the server: ``s3rver 3.7.1``, ``moto 5.x`` or the URL."""
        if self.kind == "rgw":
            return f"ceph rgw {_ceph_version()}"
        if self.kind == "s3rver":
            return f"s3rver {S3RVER_VERSION}"
        if self.kind == "moto":
            try:
                import moto

                return f"moto {moto.__version__}"
            except ImportError:  # pragma: no cover - moto is a test dependency
                return "moto"
        return self.url

    def env(self) -> dict[str, str]:
        """The AWS variables a client process needs to sign for this server."""
        out = {"AWS_DEFAULT_REGION": self.region}
        if self.access_key is not None and self.secret_key is not None:
            out["AWS_ACCESS_KEY_ID"] = self.access_key
            out["AWS_SECRET_ACCESS_KEY"] = self.secret_key
        return out

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``session.create_client("s3", **kwargs)`` (boto3/aiobotocore)."""
        kwargs: dict[str, Any] = {"endpoint_url": self.url, "region_name": self.region}
        if self.access_key is not None and self.secret_key is not None:
            kwargs["aws_access_key_id"] = self.access_key
            kwargs["aws_secret_access_key"] = self.secret_key
        return kwargs


async def settle_disk() -> None:
    """Write back every dirty page now, before a timed run starts (untimed).

    Local servers keep objects on disk through the page cache. Without this, the kernel writes
    back the earlier runs' data during later runs (the flusher starts at 10 % of RAM dirty), so
    a run pays for its predecessors' bytes: repeats on s3rver measured server CPU per GiB
    rising by up to 2x from one repeat to the next. Each side's timed run now starts clean and
    pays only for its own writes.
    """
    await asyncio.to_thread(os.sync)


def _ceph_version() -> str:
    try:
        out = subprocess.run(["ceph", "--version"], capture_output=True, text=True, timeout=30,
                             check=False).stdout.split()
    except OSError:
        return "?"
    return out[2] if len(out) > 2 else "?"


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def ensure_s3rver(node_dir: Path = DEFAULT_NODE_DIR, *, quiet: bool = True) -> Path:
    """The path of s3rver's ``bin/s3rver.js``, installing it with npm first if needed."""
    script = node_dir / "node_modules" / "s3rver" / "bin" / "s3rver.js"
    if script.is_file():
        return script
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise ServerError("s3rver needs Node.js and npm on PATH (or use --server moto, or "
                          "--endpoint URL for a running S3 server)")
    node_dir.mkdir(parents=True, exist_ok=True)
    cmd = [npm, "install", "--prefix", str(node_dir), "--no-audit", "--no-fund",
           "--no-save", "--loglevel=error", f"s3rver@{S3RVER_VERSION}"]
    if not quiet:
        print(f"installing s3rver {S3RVER_VERSION} into {node_dir} ...", file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0 or not script.is_file():
        raise ServerError(f"npm install of s3rver failed (exit {proc.returncode}):\n"
                          f"{proc.stderr.strip()[-2000:]}")
    return script


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float, log_path: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"server exited at start (code {proc.returncode}); see {log_path}:"
                              f"\n{_tail(log_path)}")
        try:
            with urllib.request.urlopen(url + "/", timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answers HTTP (an S3 error document is an answer)
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise ServerError(f"server did not answer on {url} within {timeout:.0f} s; see {log_path}")


def _tail(path: str, n: int = 2000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


@contextlib.contextmanager
def _patched_env(values: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _rgw_server(data_dir: str | None, set_env: bool,
                dns_name: str | None) -> Iterator[BenchServer]:
    cluster = RGWCluster(data_dir, dns_name=dns_name)
    try:
        try:
            cluster.start()
        except RGWError as exc:
            raise ServerError(str(exc)) from exc
        pids = cluster.pids()
        server = BenchServer(cluster.endpoint, "rgw", cluster.access_key, cluster.secret_key,
                             cluster.region, pids["rgw"], str(cluster.dir),
                             str(cluster.dir / "log"), tuple(pids.values()))
        with _patched_env(server.env()) if set_env else contextlib.nullcontext():
            yield server
    finally:
        cluster.stop()


@contextlib.contextmanager
def bench_server(kind: str = DEFAULT_KIND, *, endpoint: str | None = None, set_env: bool = True,
                 node_dir: Path = DEFAULT_NODE_DIR, data_dir: str | None = None,
                 startup_timeout: float = 60.0,
                 dns_name: str | None = None) -> Iterator[BenchServer]:
    """Start (or, with ``endpoint``, just name) an S3 server for the duration of the block.

    ``kind`` is ``rgw``, ``s3rver`` or ``moto``; ignored when ``endpoint`` is given. ``data_dir``
    is the parent directory for RGW's or s3rver's store (default: the system temp dir, which
    must be on disk, not tmpfs, for runs of a few GiB). ``set_env`` puts the server's
    credentials in the AWS variables while the block runs. ``dns_name``: RGW's domain for
    virtual-hosted-style requests (``bucket.DOMAIN``; clients such as awscrt that address
    buckets that way need it); the other servers answer both styles anyway.
    """
    if endpoint:
        yield BenchServer(endpoint.rstrip("/"), "external",
                          region=os.environ.get("AWS_DEFAULT_REGION", REGION))
        return
    if kind not in KINDS:
        raise ServerError(f"unknown server kind {kind!r}: use one of {', '.join(KINDS)}")
    exit_on_sigterm()
    if kind == "rgw":
        with _rgw_server(data_dir, set_env, dns_name) as server:
            yield server
        return
    port = free_port()
    url = f"http://{HOST}:{port}"
    store_dir: str | None = None
    log = tempfile.NamedTemporaryFile(prefix=f"bench-{kind}-", suffix=".log",  # noqa: SIM115
                                      delete=False)
    if kind == "s3rver":
        script = ensure_s3rver(node_dir, quiet=False)
        store_dir = tempfile.mkdtemp(prefix="s3rver-", dir=data_dir)
        argv = ["node", str(script), "--directory", store_dir, "--address", HOST,
                "--port", str(port), "--silent", "--no-vhost-buckets",
                "--allow-mismatched-signatures"]
        server = BenchServer(url, kind, S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY,
                             data_dir=store_dir, log_path=log.name)
    else:
        argv = [sys.executable, "-c", _MOTO_BOOT, HOST, str(port)]
        server = BenchServer(url, kind, MOTO_ACCESS_KEY, MOTO_SECRET_KEY, log_path=log.name)
    env = dict(os.environ)
    env.setdefault("TMPDIR", tempfile.gettempdir())
    proc: subprocess.Popen[bytes] | None = None
    failed = True
    try:
        # own session: a Ctrl-C in the terminal reaches us, and we stop the server in order
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        server = BenchServer(server.url, server.kind, server.access_key, server.secret_key,
                             server.region, proc.pid, server.data_dir, server.log_path,
                             (proc.pid,))
        _wait_ready(url, proc, startup_timeout, log.name)
        with _patched_env(server.env()) if set_env else contextlib.nullcontext():
            yield server
        failed = False
    finally:
        if proc is not None:
            stop_process_group(proc, STOP_GRACE_S)
        log.close()
        if not failed:  # kept after a failure: error messages point at it
            with contextlib.suppress(OSError):
                os.unlink(log.name)
        if store_dir is not None:
            shutil.rmtree(store_dir, ignore_errors=True)


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """``--server``, ``--endpoint``, ``--node-dir`` and ``--data-dir``, as every benchmark has."""
    parser.add_argument("--server", choices=KINDS, default=DEFAULT_KIND,
                        help="S3 server to start on a free loopback port: rgw (Ceph's RADOS "
                        "Gateway, a production server; Debian packages ceph-mon ceph-osd "
                        "radosgw ceph-common), s3rver (npm, installed on demand; one "
                        "JavaScript thread, disk-backed) or moto (PyPI; faithful errors, "
                        f"in-memory) [default: {DEFAULT_KIND}]")
    parser.add_argument("--endpoint", metavar="URL", default=None,
                        help="use this running S3 endpoint instead of starting a server "
                        "(credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
    parser.add_argument("--node-dir", metavar="DIR", type=Path, default=DEFAULT_NODE_DIR,
                        help=f"npm prefix where s3rver is installed [default: {DEFAULT_NODE_DIR}]")
    parser.add_argument("--data-dir", metavar="DIR", default=None,
                        help="parent directory of RGW's or s3rver's on-disk store, removed "
                        "afterwards (must be on disk) [default: the system temp dir]")


def server_from_args(args: argparse.Namespace, *, dns_name: str | None = None
                     ) -> contextlib.AbstractContextManager[BenchServer]:
    """``bench_server`` for the flags added by :func:`add_server_arguments`."""
    return bench_server(args.server, endpoint=args.endpoint, node_dir=args.node_dir,
                        data_dir=args.data_dir, dns_name=dns_name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run a benchmark S3 server on a free loopback port until Ctrl-C; prints "
        "its endpoint and the AWS variables to sign with.")
    add_server_arguments(parser)
    args = parser.parse_args(argv)
    stop: list[int] = []

    def _on_signal(signum: int, _frame: object) -> None:
        stop.append(signum)

    try:
        with server_from_args(args) as server:
            out: IO[str] = sys.stdout
            pids = " ".join(map(str, server.pids))
            print(f"{server.name} at {server.url} (pids {pids})", file=out)
            for k, v in server.env().items():
                print(f"export {k}={v}", file=out)
            out.flush()
            signal.signal(signal.SIGTERM, _on_signal)
            signal.signal(signal.SIGINT, _on_signal)
            while not stop:
                time.sleep(0.2)
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
