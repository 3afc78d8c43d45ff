"""A real Ceph RADOS Gateway (RGW) on loopback: one mon, one bluestore OSD, one radosgw.

Used by the ``rgw`` pytest tier and by ``benchmarks/servers.py --server rgw``. Needs Debian's
Ceph packages (``apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw
ceph-common``); :func:`missing_binaries` names what is absent.

    cluster = RGWCluster()          # a fresh directory under $TMPDIR
    cluster.start()                 # mon, OSD, radosgw, S3 user: 4-10 s from nothing
    cluster.endpoint, cluster.access_key, cluster.secret_key
    cluster.restart_gateway()       # radosgw alone, data kept (~2 s)
    cluster.stop()                  # exactly the daemons it started, then removes the directory

Settings that matter (measured on the 2-core machines, issue 16): ``tcp_nodelay=1`` on the beast
frontend (without it small GETs and empty PUTs stall ~43 ms on Nagle), ``paxos propose
interval = 0.1`` (first start ~1 s instead of ~9 s), ``libtcmalloc.so.4`` preloaded (Debian links
the daemons against glibc malloc; tcmalloc cuts large-object CPU ~40 %), one-OSD pool sizing,
bluestore over a sparse file (memstore's memory is unbounded and it hangs when full). There is
no ceph-mgr: nothing here needs one. Every daemon runs in the foreground (``-f``) as a child in
its own session, so stopping never touches a Ceph process this object did not start.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from tests.support.procgroup import stop_process_group

HOST = "127.0.0.1"
REGION = "us-east-1"
ACCESS_KEY = "s3kvrgwaccess"
SECRET_KEY = "s3kvrgwsecretkey0123456789"
BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "ceph-authtool",
            "monmaptool")
TCMALLOC_CANDIDATES = ("/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
                       "/usr/lib/aarch64-linux-gnu/libtcmalloc.so.4",
                       "/usr/lib/libtcmalloc.so.4")
INSTALL_HINT = ("apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw "
                "ceph-common")
#: seconds a daemon gets to exit after SIGTERM before SIGKILL
STOP_GRACE_S = 15.0


class RGWError(RuntimeError):
    """The Ceph cluster could not be set up or did not come up."""


def missing_binaries() -> list[str]:
    """The Ceph programs this launcher needs that are not on PATH."""
    return [b for b in BINARIES if shutil.which(b) is None]


def tcmalloc_path() -> str | None:
    return next((p for p in TCMALLOC_CANDIDATES if os.path.exists(p)), None)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


_CONF = """\
[global]
fsid = {fsid}
mon host = v2:{host}:{mon_port}
mon initial members = a
public addr = {host}
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = {dir}/keyring.$name
run dir = {dir}/run
admin socket = {dir}/run/$name.asok
log file = {dir}/log/$name.log
log to stderr = false
err to stderr = true
mon cluster log file = {dir}/log/cluster.log
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
osd crush chooseleaf type = 0
mon warn on pool no redundancy = false
paxos propose interval = 0.1
mon data = {dir}/mon/$cluster-$id
osd data = {dir}/osd/$cluster-$id
osd objectstore = bluestore
bluestore block path = {dir}/osd/block.$id
bluestore block create = true
bluestore block size = {block_size}
bluestore fsck on mount = false
osd memory target = {memory_target}
osd max object size = 1073741824
rgw frontends = beast endpoint={host}:{rgw_port} tcp_nodelay=1
rgw dns name = {dns_name}
rgw enable usage log = false
"""


class RGWCluster:
    """One mon, one OSD, one radosgw and one S3 user, in a directory of its own."""

    def __init__(self, base_dir: str | None = None, *, block_size: int = 64 << 30,
                 memory_target: int = 1536 << 20, tcmalloc: bool = True,
                 access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY,
                 dns_name: str | None = None) -> None:
        """``block_size``: the OSD's sparse bluestore file (only written bytes take disk);
        ``access_key``/``secret_key``: the S3 user's keys; ``dns_name``: the domain under which
        RGW answers virtual-hosted-style requests (``bucket.DOMAIN``; default: its IP, so
        path-style only). Path-style requests to the IP work either way."""
        self.dir = Path(tempfile.mkdtemp(prefix="rgw-", dir=base_dir))
        self.host = HOST
        self.dns_name = dns_name or HOST
        self.mon_port = _free_port()
        self.port = _free_port()
        self.fsid = str(uuid.uuid4())
        self.block_size = block_size
        self.memory_target = memory_target
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = REGION
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._env = dict(os.environ)
        lib = tcmalloc_path() if tcmalloc else None
        if lib is not None:
            self._env["LD_PRELOAD"] = lib
        self.conf = self.dir / "ceph.conf"

    # -- what callers use ----------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def pids(self) -> dict[str, int]:
        """The daemons' process ids by name (``mon``, ``osd``, ``rgw``), for CPU accounting."""
        return {name: p.pid for name, p in self.procs.items() if p.poll() is None}

    def start(self, timeout: float = 90.0) -> None:
        """Create the cluster from nothing and wait until the S3 user can be served."""
        deadline = time.monotonic() + timeout
        try:
            missing = missing_binaries()
            if missing:
                raise RGWError(f"Ceph programs missing: {', '.join(missing)}; install them "
                               f"with: {INSTALL_HINT}")
            self._write_conf()
            self._make_mon()
            self._spawn("mon", ["ceph-mon", "-f", "-i", "a"])
            self._make_osd()
            self._spawn("osd", ["ceph-osd", "-f", "-i", "0"])
            self._wait_osd_up(deadline)
            self._ceph("auth", "get-or-create", "client.rgw.a", "mon", "allow rw", "osd",
                       "allow rwx", "-o", str(self.dir / "keyring.client.rgw.a"))
            self._spawn_rgw()
            self._wait_http(deadline)
            self._make_user(deadline)
        except BaseException:
            self.stop()
            raise

    def restart_gateway(self, timeout: float = 60.0, down_for: float = 0.0) -> None:
        """Stop radosgw alone and start it again, ``down_for`` seconds later: the data (mon,
        OSD) stays."""
        self.stop_gateway()
        time.sleep(down_for)
        self.start_gateway(timeout)

    def stop_gateway(self) -> None:
        """Stop radosgw alone (its port then refuses connections); mon and OSD keep running."""
        proc = self.procs.pop("rgw", None)
        if proc is not None:
            stop_process_group(proc, STOP_GRACE_S)

    def start_gateway(self, timeout: float = 60.0) -> None:
        """Start radosgw again on the same port and data; returns once it answers."""
        self._spawn_rgw()
        self._wait_http(time.monotonic() + timeout)

    def pause_gateway(self) -> None:
        """Stop radosgw with SIGSTOP: connections are accepted and never answered (a hung
        server, not a refusing one). :meth:`resume_gateway` lets it go on."""
        os.kill(self.procs["rgw"].pid, signal.SIGSTOP)

    def resume_gateway(self) -> None:
        os.kill(self.procs["rgw"].pid, signal.SIGCONT)

    def set_bucket_quota(self, bucket: str, max_bytes: int) -> None:
        """Give ``bucket`` a quota of ``max_bytes`` (``radosgw-admin quota``): writes past it
        are refused with 403 QuotaExceeded."""
        admin = ("radosgw-admin", "-n", "client.admin", "quota")
        self._run(*admin, "set", "--quota-scope=bucket", f"--bucket={bucket}",
                  f"--max-size={max_bytes}")
        self._run(*admin, "enable", "--quota-scope=bucket", f"--bucket={bucket}")

    def stop(self, *, wipe: bool = True) -> None:
        """Stop the daemons this object started (radosgw, OSD, mon), then remove the directory."""
        for name in ("rgw", "osd", "mon"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                stop_process_group(proc, STOP_GRACE_S)
        if wipe:
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, name: str, n: int = 3000) -> str:
        path = self.dir / "log" / name
        try:
            return path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # -- set-up steps --------------------------------------------------------------------------
    def _write_conf(self) -> None:
        for sub in ("run", "log", "mon", "osd/ceph-0"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(_CONF.format(
            fsid=self.fsid, host=self.host, mon_port=self.mon_port, rgw_port=self.port,
            dir=self.dir, block_size=self.block_size, memory_target=self.memory_target,
            dns_name=self.dns_name))

    def _run(self, *argv: str, timeout: float = 60.0) -> str:
        cmd = [argv[0], "-c", str(self.conf), *argv[1:]]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                 env=self._env, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RGWError(f"{' '.join(argv[:3])} timed out after {timeout:.0f} s") from exc
        if out.returncode != 0:
            raise RGWError(f"{' '.join(argv)} failed (exit {out.returncode}): "
                           f"{(out.stderr or out.stdout).strip()[-1500:]}")
        return out.stdout

    def _ceph(self, *args: str, timeout: float = 60.0) -> str:
        return self._run("ceph", "--connect-timeout", "20", *args, timeout=timeout)

    def _make_mon(self) -> None:
        d = str(self.dir)
        mon_key = f"{d}/keyring.mon.a"
        admin_key = f"{d}/keyring.client.admin"
        subprocess.run(["ceph-authtool", "--create-keyring", admin_key, "--gen-key", "-n",
                        "client.admin", "--cap", "mon", "allow *", "--cap", "osd", "allow *",
                        "--cap", "mgr", "allow *"], check=True, capture_output=True)
        subprocess.run(["ceph-authtool", "--create-keyring", mon_key, "--gen-key", "-n",
                        "mon.", "--cap", "mon", "allow *"], check=True, capture_output=True)
        subprocess.run(["ceph-authtool", mon_key, "--import-keyring", admin_key], check=True,
                       capture_output=True)
        monmap = f"{d}/monmap"
        subprocess.run(["monmaptool", "--create", "--fsid", self.fsid, "--addv", "a",
                        f"[v2:{self.host}:{self.mon_port}]", monmap], check=True,
                       capture_output=True)
        self._run("ceph-mon", "--mkfs", "-i", "a", "--monmap", monmap, "--keyring", mon_key)

    def _make_osd(self) -> None:
        osd_uuid = str(uuid.uuid4())
        key = subprocess.run(["ceph-authtool", "--gen-print-key"], check=True,
                             capture_output=True, text=True).stdout.strip()
        secrets = self.dir / "osd-secrets.json"
        secrets.write_text(json.dumps({"cephx_secret": key}))
        osd_id = self._ceph("osd", "new", osd_uuid, "-i", str(secrets)).strip()
        if osd_id != "0":
            raise RGWError(f"expected osd id 0 from 'ceph osd new', got {osd_id!r}")
        keyring = self.dir / "keyring.osd.0"
        subprocess.run(["ceph-authtool", "--create-keyring", str(keyring), "--name", "osd.0",
                        "--add-key", key], check=True, capture_output=True)
        self._run("ceph-osd", "-i", "0", "--mkfs", "--osd-uuid", osd_uuid, timeout=120)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / "log" / f"{name}.stderr", "ab")  # noqa: SIM115
        try:
            self.procs[name] = subprocess.Popen(
                [argv[0], "-c", str(self.conf), *argv[1:]], stdout=log,
                stderr=subprocess.STDOUT, env=self._env, start_new_session=True)
        finally:
            log.close()

    def _spawn_rgw(self) -> None:
        self._spawn("rgw", ["radosgw", "-f", "-n", "client.rgw.a"])

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RGWError(f"ceph {name} exited (code {proc.returncode}); logs in "
                               f"{self.dir / 'log'}:\n{self.log_tail(f'{name}.stderr')}")

    def _wait_osd_up(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            stat = json.loads(self._ceph("osd", "stat", "--format", "json"))
            if int(stat.get("num_up_osds", 0)) >= 1:
                return
            time.sleep(0.2)
        raise RGWError(f"the OSD did not come up; logs in {self.dir / 'log'}")

    def _wait_http(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                    return
            except urllib.error.HTTPError:
                return  # an S3 error document is an answer
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise RGWError(f"radosgw did not answer on {self.endpoint}; logs in {self.dir / 'log'}")

    def _make_user(self, deadline: float) -> None:
        while True:
            try:
                self._run("radosgw-admin", "-n", "client.admin", "user", "create", "--uid",
                          "s3kv", "--display-name", "s3kv tests", "--access-key",
                          self.access_key, "--secret", self.secret_key)
                return
            except RGWError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)


# -- counters, for the benchmarks' backend cost (server side, so both sides count alike) -------
def _admin(cluster_dir: str, *argv: str) -> dict[str, object]:
    conf = str(Path(cluster_dir) / "ceph.conf")
    out = subprocess.run([argv[0], "-c", conf, *argv[1:]], capture_output=True, text=True,
                         timeout=60, check=False)
    if out.returncode != 0:
        raise RGWError(f"{' '.join(argv[:4])} failed: {out.stderr.strip()[-500:]}")
    doc: dict[str, object] = json.loads(out.stdout)
    return doc


def admin_socket(path: str, prefix: str = "perf dump") -> dict[str, object]:
    """One command on a Ceph daemon's admin socket (its wire protocol: the JSON command ending
    in NUL; the answer a 4-byte big-endian length and JSON), without starting the ``ceph`` CLI
    (a Python program costing ~0.5 CPU-s per call)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(path)
        s.sendall(json.dumps({"prefix": prefix, "format": "json"}).encode() + b"\0")
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
            chunk = s.recv(1 << 16)
            if not chunk:
                raise RGWError(f"admin socket {path} closed mid-answer")
            buf += chunk
    doc: dict[str, object] = json.loads(buf[4:4 + int.from_bytes(buf[:4], "big")])
    return doc


def rgw_counters(cluster_dir: str) -> dict[str, int]:
    """radosgw's request counters (perf dump over its admin socket): ``req`` (every HTTP
    request), ``put``/``put_b`` (object and part PUTs, their bytes), ``get``/``get_b``."""
    try:
        doc = admin_socket(str(Path(cluster_dir) / "run" / "client.rgw.a.asok"))
    except OSError as exc:
        raise RGWError(f"radosgw's admin socket: {exc}") from exc
    rgw = doc.get("rgw", {})
    assert isinstance(rgw, dict)
    return {k: int(rgw.get(k, 0)) for k in ("req", "failed_req", "put", "put_b", "get", "get_b")}


def bucket_objects(cluster_dir: str, bucket: str) -> tuple[int, int]:
    """(objects, bytes) RGW's bucket index counts in ``bucket`` (``radosgw-admin bucket stats``)."""
    doc = _admin(cluster_dir, "radosgw-admin", "-n", "client.admin", "bucket", "stats",
                 "--bucket", bucket)
    usage = doc.get("usage", {})
    main = usage.get("rgw.main", {}) if isinstance(usage, dict) else {}
    return int(main.get("num_objects", 0)), int(main.get("size", 0))
