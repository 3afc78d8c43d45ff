"""The file backend (``--store file:///...``) on a disk that fills up, and in a directory the
gateway may not write.

- disk full: the store lives on a small tmpfs mounted for the test; a filler file takes the rest
  of the space while S3 clients keep writing. (Where mounting is not permitted, the same faults
  come from RLIMIT_FSIZE set on the running gateway with ``prlimit``: writes past the limit fail
  with EFBIG instead of ENOSPC.) Then the filler goes away.
- permission denied: the gateway runs as an unprivileged user (uid/gid 65534; root ignores
  permission bits), and the store's directories lose their write bits under it.

Expected, and checked: clear errors (503 SlowDown or ServiceUnavailable whose message names the
cause), no corruption (every block acknowledged durable before and during the fault reads back;
write-back blocks read back exactly or miss; no half-written segment is ever visible: every
segment file on disk is complete, with a valid trailer and manifest, and no upload or temporary
file is left behind), and recovery by itself once space or permission returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3kv.store import layout
from tests.reliability.conftest import Report
from tests.support.gateway import Gateway, gateway_client
from tests.support.loadgen import (
    GatewayClients,
    Ledger,
    MiB,
    RssSampler,
    classify,
    flush,
    http_status,
    payload,
    put_block,
    stats,
    verify_all,
    wait_until,
)

FILE_ARGS = ["--segment-size", "4MiB", "--part-size", "1MiB", "--max-block-size", "1MiB",
             "--seal-after", "0.5", "--sync-interval", "0", "--dram-cache", "0",
             "--max-request-memory", "32MiB"]
NOBODY = (65534, 65534)

#: the long runs (--long) take minutes; pytest's default timeout is 300 s
pytestmark = pytest.mark.timeout(1800)


# ---- helpers ---------------------------------------------------------------------------------

def put_many(gw: Gateway, bucket: str, ledger: Ledger, prefix: str, n: int, *,
             durable_p: float, seed: int, messages: list[str] | None = None,
             stop_after_refusals: int = 0) -> int:
    """PUT ``n`` blocks in sequence (two clients in parallel); returns refusals seen.

    Refusal messages (S3 error bodies) go into ``messages``."""
    rnd = random.Random(seed)

    async def main() -> int:
        refused = 0
        async with GatewayClients(gw.endpoint) as c:
            async def one(i: int) -> str:
                durable = rnd.random() < durable_p
                return await put_block(c, ledger, bucket, f"{prefix}/{i:05d}",
                                       rnd.randint(20_000, 400_000), durable)

            for i in range(0, n, 2):
                outcomes = await asyncio.gather(one(i), one(i + 1))
                for o in outcomes:
                    assert o in ("ok", "slowdown", "unavailable"), o
                    refused += o != "ok"
                if stop_after_refusals and refused >= stop_after_refusals:
                    break
            if messages is not None:
                messages.extend(await refusal_messages(c, bucket, durable=True))
                messages.extend(await refusal_messages(c, bucket, durable=False))
        return refused

    return asyncio.run(main())


async def refusal_messages(c: GatewayClients, bucket: str, *, durable: bool) -> list[str]:
    """One more PUT; if refused, its code and message."""
    client = c.durable if durable else c.plain
    try:
        await client.put_object(Bucket=bucket, Key=f"probe/{uuid.uuid4().hex}",
                                Body=payload(300_000))
    except Exception as exc:
        err = getattr(exc, "response", {}).get("Error", {})
        status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
        return [f"{status} {err.get('Code', classify(exc))}: {err.get('Message', exc)}"]
    return []


def check_store_files(root: Path) -> int:
    """Every segment file is complete (valid trailer and manifest, right length); no upload in
    progress and no temporary file is left. Returns the number of segments checked."""
    leftovers = [p for p in root.rglob("*") if p.is_file() and p.name.endswith(".tmp")]
    assert not leftovers, leftovers
    uploads = {p.name: sorted((f.name, f.stat().st_size) for f in p.iterdir())
               for p in (root / ".uploads").iterdir()}
    assert not uploads, uploads
    n = 0
    for seg in (root / "segments").rglob("*"):
        if not seg.is_file():
            continue
        data = seg.read_bytes()
        moff, mlen, mcrc = layout.decode_trailer(data[-layout.TRAILER_SIZE:])
        body = data[moff:moff + mlen]
        assert layout.checksum(body) == mcrc, seg
        manifest = layout.Manifest.decode(body)
        assert manifest.segment_length == len(data), seg
        for e in manifest.entries:
            if not e.tombstone:
                assert layout.checksum(data[e.offset:e.offset + e.length]) == e.crc, seg
        n += 1
    return n


@contextlib.contextmanager
def small_disk(size_mib: int) -> Iterator[tuple[Path, str]]:
    """A directory on a filesystem of ``size_mib`` MiB (tmpfs), or a plain directory when
    mounting is not permitted (then the caller limits file sizes instead). Yields (dir, how)."""
    base = Path(tempfile.mkdtemp(prefix="s3kv-disk-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755",
                              "tmpfs", str(base)], capture_output=True, check=False)
    try:
        yield base, "tmpfs" if mounted.returncode == 0 else "rlimit"
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def _usage(root: Path) -> str:
    """What holds the space under ``root``: free bytes, then the largest files."""
    vfs = os.statvfs(root)
    files = sorted(((p.stat().st_size, str(p.relative_to(root))) for p in root.rglob("*")
                    if p.is_file()), reverse=True)
    return f"{vfs.f_bavail * vfs.f_frsize} bytes free; largest files {files[:8]}"


def fill(path: Path) -> int:
    """Write zeros into ``path`` until the filesystem is full; returns bytes written."""
    written = 0
    chunk = b"\0" * MiB
    try:
        path.touch()
    except OSError as exc:  # full before the filler: say what filled it
        raise AssertionError(f"no room for the filler: {_usage(path.parent)}") from exc
    with open(path, "wb") as fh:
        try:
            while True:
                fh.write(chunk)
                fh.flush()
                written += len(chunk)
        except OSError:
            pass
    return written


# ---- disk full -------------------------------------------------------------------------------

def test_disk_full(reliability_report: Report, long_run: bool) -> None:
    rounds = 4 if long_run else 1
    seed = random.randrange(1 << 30)
    with small_disk(48) as (base, how):
        root = base / "store"
        gw = Gateway(f"file://{root}", FILE_ARGS)
        ledger = Ledger()
        messages: list[str] = []
        refused_total = 0
        try:
            gw.start()
            gateway_client(gw.endpoint).create_bucket(Bucket="disk")
            with RssSampler(lambda: gw.pid) as rss:
                for r in range(rounds):
                    # before the fault: durable and write-back blocks, all acknowledged
                    put_many(gw, "disk", ledger, f"before{r}", 16, durable_p=0.5, seed=seed + r)
                    assert all(b.acked for k, b in ledger.blocks.items()
                               if k.startswith(f"before{r}/")), ledger.counts
                    # the disk fills up (another writer took the space) while clients write on
                    if how == "tmpfs":
                        fill(base / "filler")
                    else:
                        subprocess.run(["prlimit", "--pid", str(gw.pid), "--fsize=65536"],
                                       check=True)
                    refused = put_many(gw, "disk", ledger, f"full{r}", 60, durable_p=0.3,
                                       seed=seed + 100 + r, messages=messages,
                                       stop_after_refusals=6)
                    refused_total += refused
                    assert refused > 0, "PUTs were never refused on a full disk"
                    assert http_status(gw.endpoint + "/healthz") == 200
                    # everything acknowledged durable reads back, nothing else differs
                    asyncio.run(verify_all(gw.endpoint, "disk", ledger))
                    st = stats(gw.endpoint)
                    assert st["segments_failed"] >= 1, st
                    # space returns: the gateway takes writes again without a restart
                    if how == "tmpfs":
                        (base / "filler").unlink()
                    else:
                        subprocess.run(["prlimit", "--pid", str(gw.pid), "--fsize=unlimited"],
                                       check=True)
                    assert wait_until(lambda r=r: put_many(
                        gw, "disk", ledger, f"after{r}-{uuid.uuid4().hex[:6]}", 2,
                        durable_p=1.0, seed=seed) == 0, 30, interval=0.5), "no recovery"
                    put_many(gw, "disk", ledger, f"after{r}", 10, durable_p=0.5, seed=seed + r)
                    flush(gw.endpoint)
                    assert wait_until(lambda: http_status(gw.endpoint + "/readyz") == 200, 20)
                    asyncio.run(verify_all(gw.endpoint, "disk", ledger))
                # a restart on the same directory: the index comes back, files are whole
                assert gw.terminate() == 0
                segments = check_store_files(root)
                gw.start()
                asyncio.run(verify_all(gw.endpoint, "disk", ledger))
        finally:
            gw.cleanup()
    cause = "No space left on device" if how == "tmpfs" else "File too large"
    clear = [m for m in messages if m.startswith("503") and cause in m]
    reliability_report.record(
        "disk", f"file backend: disk full ({how}), then space freed", faults=rounds,
        requests=ledger.requests, wrong_bytes=len(ledger.wrong),
        durable_lost=len(ledger.durable_lost), peak_rss_mib=rss.peak_mib,
        held=not ledger.wrong and not ledger.durable_lost and bool(clear),
        note=f"seed {seed}; PUTs refused {refused_total}; e.g. {messages[:1]}; "
             f"{segments} segment files checked whole after restart")
    assert not ledger.wrong and not ledger.durable_lost, (ledger.wrong, ledger.durable_lost)
    assert clear, messages  # the refusal says why


# ---- permission denied -----------------------------------------------------------------------

def _set_writable(root: Path, writable: bool) -> None:
    """Add or take away the write bits of every directory of the store (files stay readable)."""
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        os.chmod(d, 0o755 if writable else 0o555)


def test_permission_denied(reliability_report: Report, long_run: bool, tmp_path: Path) -> None:
    rounds = 3 if long_run else 1
    seed = random.randrange(1 << 30)
    base = Path(tempfile.mkdtemp(prefix="s3kv-perm-"))
    os.chmod(base, 0o755)
    root = base / "store"
    root.mkdir()
    os.chown(root, *NOBODY)
    gw = Gateway(f"file://{root}", FILE_ARGS, user=NOBODY)
    ledger = Ledger()
    messages: list[str] = []
    refused_total = 0
    try:
        gw.start()
        gateway_client(gw.endpoint).create_bucket(Bucket="perm")
        with RssSampler(lambda: gw.pid) as rss:
            for r in range(rounds):
                put_many(gw, "perm", ledger, f"before{r}", 16, durable_p=0.5, seed=seed + r)
                flush(gw.endpoint)
                assert all(b.acked for k, b in ledger.blocks.items()
                           if k.startswith(f"before{r}/")), ledger.counts
                _set_writable(root, False)
                try:
                    refused = put_many(gw, "perm", ledger, f"denied{r}", 40, durable_p=0.3,
                                       seed=seed + 50 + r, messages=messages,
                                       stop_after_refusals=6)
                    refused_total += refused
                    assert refused > 0
                    assert http_status(gw.endpoint + "/readyz") == 503
                    # reads go on: what is on disk is still readable
                    asyncio.run(verify_all(gw.endpoint, "perm", ledger))
                finally:
                    _set_writable(root, True)
                assert wait_until(lambda r=r: put_many(
                    gw, "perm", ledger, f"after{r}-{uuid.uuid4().hex[:6]}", 2,
                    durable_p=1.0, seed=seed) == 0, 30, interval=0.5), "no recovery"
                assert wait_until(lambda: http_status(gw.endpoint + "/readyz") == 200, 20)
                asyncio.run(verify_all(gw.endpoint, "perm", ledger))
            assert gw.terminate() == 0
            segments = check_store_files(root)
            gw.start()
            asyncio.run(verify_all(gw.endpoint, "perm", ledger))
        gw.cleanup()
        # a store directory it cannot create: the gateway refuses to start, and says why
        denied = Gateway(f"file://{base}/locked/store", FILE_ARGS, user=NOBODY)
        os.makedirs(base / "locked", mode=0o555)
        try:
            with pytest.raises(RuntimeError) as info:
                denied.start()
            assert "Permission denied" in str(info.value), str(info.value)[-500:]
        finally:
            denied.cleanup()
    finally:
        gw.cleanup()
        _set_writable(root, True)
        shutil.rmtree(base, ignore_errors=True)
    clear = [m for m in messages if m.startswith("503") and "Permission denied" in m]
    reliability_report.record(
        "disk", "file backend: permission denied (gateway as uid 65534), then restored",
        faults=rounds + 1, requests=ledger.requests, wrong_bytes=len(ledger.wrong),
        durable_lost=len(ledger.durable_lost), peak_rss_mib=rss.peak_mib,
        held=not ledger.wrong and not ledger.durable_lost and bool(clear),
        note=f"seed {seed}; PUTs refused {refused_total}; e.g. {messages[:1]}; {segments} "
             "segment files checked whole; start on an unwritable directory: refused, "
             "with the cause")
    assert not ledger.wrong and not ledger.durable_lost
    assert clear, messages
