"""Security: path tricks in bucket and key names on the file backend; nothing outside the
store directory is written or served."""

from __future__ import annotations

import os
import unicodedata
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.conftest import Report
from tests.reliability.security.tenants import RID, check, client
from tests.support.gateway import SMALL, Gateway, running_gateway
from tests.support.rawhttp import Response

SECRET = b"TOP-SECRET-do-not-serve-" + uuid.uuid4().hex.encode()

BUCKET_TRICKS = ["..", "%2e%2e", "%2E%2E", ".", "...", "a..b", "..%2f..%2fetc", "%2e%2e%2fx",
                 "store", "%00abc", "abc%00", "ab%2fc", "ab%5cc", "ABC", "a" * 64, "aa",
                 "x" * 63, "caf%C3%A9", "ab%0d%0aSet-Cookie:x=1", ".uploads", "-abc", "abc-"]

KEY_TRICKS = ["../secret.txt", "%2e%2e/secret.txt", "%2E%2E%2Fsecret.txt", "..%2fsecret.txt",
              "a/../../secret.txt", "a/%2e%2e/%2e%2e/secret.txt", "./x", "x/.", "%2e",
              "//etc/passwd", "/abs", "a//b", "a%2F%2Fb", "a%2fb", "%00nul", "x%00y",
              "a%0d%0aSet-Cookie:%20x=1", "%7f", "%ff%fe", "%c0%ae%c0%ae/secret.txt",
              "a%5c..%5c..%5csecret.txt", "..%5csecret.txt", ".uploads/x", "segments/x",
              "k" * 1024, "k" * 1025, "%F0%9F%94%91" * 256, "%F0%9F%94%91" * 257,
              "%E6%97%A5%E6%9C%AC/%E3%82%AD%E3%83%BC", "%E2%80%AEtxt.exe", "%EF%BB%BFbom",
              "caf%C3%A9", "cafe%CC%81", "%EF%BC%8E%EF%BC%8E/secret.txt", "a?b", "a%3Fb",
              "a%23b", "a+b", "a%20b", "~user", "con", "nul.txt", "a" * 200 + "/" + "b" * 200]


def _tree(root: Path) -> dict[str, int]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = 0 if p.is_dir() else p.stat().st_size
    return out


@pytest.fixture(scope="module")
def file_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    root = tmp_path_factory.mktemp("fileroot")
    (root / "secret.txt").write_bytes(SECRET)
    (root / "sibling").mkdir()
    (root / "sibling" / "secret.txt").write_bytes(SECRET)
    store = root / "store"
    with running_gateway(f"file://{store}", [*SMALL]) as g:
        yield g, root


def test_path_tricks_file_backend(file_gw: tuple[Gateway, Path], counter: list[int],
                                  reliability_report: Report) -> None:
    g, root = file_gw
    c = client(g, "admin", counter)
    outside_before = {k: v for k, v in _tree(root).items() if not k.startswith("store")}
    faults = 0
    seen: list[Response] = []

    def go(method: str, target: str, body: bytes = b"") -> Response:
        r = check(c(method, target, body))
        assert SECRET not in r.body
        seen.append(r)
        return r

    for b in BUCKET_TRICKS:
        faults += 1
        created = go("PUT", f"/{b}").status == 200
        go("PUT", f"/{b}/k", b"data")
        go("GET", f"/{b}/k")
        go("GET", f"/{b}/secret.txt")
        go("GET", f"/{b}?list-type=2")
        go("HEAD", f"/{b}")
        if created:  # only names S3 accepts, decoded: e.g. 'aa' is too short, 'x'*63 is fine
            go("DELETE", f"/{b}/k")
            assert go("DELETE", f"/{b}").status == 204
    bucket = f"paths-{RID}"
    assert go("PUT", f"/{bucket}").status == 200
    stored: dict[str, bytes] = {}
    for i, k in enumerate(KEY_TRICKS):
        faults += 1
        data = f"value-{i}".encode()
        r = go("PUT", f"/{bucket}/{k}", data)
        if r.status == 200:
            got = go("GET", f"/{bucket}/{k}")
            assert got.body == data, (k, got)
            stored[k] = data
        elif "?" in k:  # a raw '?' starts the query: 'b' is no parameter PutObject takes
            assert (r.status, r.code) == (501, "NotImplemented"), (k, r)
        else:
            assert r.status == 400, (k, r)
            assert r.code in ("InvalidArgument", "KeyTooLongError", "InvalidURI"), (k, r)
            assert go("GET", f"/{bucket}/{k}").status in (400, 404)
        go("HEAD", f"/{bucket}/{k}")
    # what must be refused
    from urllib.parse import unquote

    for k in KEY_TRICKS:
        key = unquote(k, errors="surrogateescape")
        parts = key.split("/")
        must_refuse = (".." in parts or "." in parts or len(key.encode("utf-8", "surrogateescape"))
                       > 1024 or any(ord(ch) < 32 or ord(ch) == 0x7f for ch in key)
                       or "\udcff" in key or "\udcc0" in key
                       or "?" in k)  # the allow-list: PUT /b/a?b is not a PutObject
        assert (k not in stored) == must_refuse, (k, must_refuse)
    # unicode normalisation: keys are bytes; NFC and NFD forms are two keys, each exact
    nfc, nfd = "caf%C3%A9", "cafe%CC%81"
    assert unicodedata.normalize("NFC", "cafe\u0301") == "caf\u00e9"
    assert stored[nfc] != stored[nfd]
    assert go("GET", f"/{bucket}/{nfc}").body == stored[nfc]
    assert go("GET", f"/{bucket}/{nfd}").body == stored[nfd]
    # every stored key is listed exactly once, as sent (decoded)
    listing = go("GET", f"/{bucket}?list-type=2&encoding-type=url").body.decode()
    listed = sorted(unquote(x.split("</Key>")[0]) for x in listing.split("<Key>")[1:])
    # as sent: '?' starts the query and '#' a fragment, so 'a?b' and 'a#b' both name 'a'
    assert listed == sorted({unquote(k.split("?")[0].split("#")[0]) for k in stored}), listed
    # header injection through a key never reaches a response header
    for r in seen:
        assert "set-cookie" not in r.headers
    # flush: the store writes its segments; then nothing outside store/ changed
    flush = c("POST", "/v1/flush")
    assert flush.status == 200, flush
    outside_after = {k: v for k, v in _tree(root).items() if not k.startswith("store")}
    assert outside_after == outside_before
    for p in (root / "store").rglob("*"):
        assert p.resolve().is_relative_to((root / "store").resolve()), p
        assert not p.is_symlink(), p
    assert (root / "secret.txt").read_bytes() == SECRET
    reliability_report.record(
        "security", "path tricks in bucket and key names on the file backend (.., %2e%2e, "
        "//, encoded slashes, NUL, unicode forms, > 1024 bytes)", faults=faults,
        requests=counter[0], note=f"{len(stored)} odd keys stored exactly; nothing outside "
        "the store dir touched")

