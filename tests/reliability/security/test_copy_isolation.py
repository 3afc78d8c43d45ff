"""Security: a server-side copy reads one namespace and writes another, so a restricted
credential needs both. A copy out of another tenant's namespace (existing or not, CopyObject or
UploadPartCopy) or into one gets the same 403 as any other request there and stores nothing."""

from __future__ import annotations

import uuid

from tests.reliability.security.tenants import Client, check, client
from tests.support.gateway import Gateway


def _upload_id(c: Client, target: str) -> str:
    r = check(c("POST", f"{target}?uploads"))
    assert r.status == 200, r
    return r.body.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()


def test_a_copy_needs_both_namespaces(gw: Gateway, counter: list[int]) -> None:
    run = uuid.uuid4().hex[:8]
    mine, theirs, ghost = f"team-a-cp-{run}", f"team-b-cp-{run}", f"team-b-ghost-cp-{run}"
    admin, a = client(gw, "admin", counter), client(gw, "team-a", counter)
    for bucket in (mine, theirs):
        assert admin("PUT", f"/{bucket}").status == 200
        assert admin("PUT", f"/{bucket}/secret", b"only " + bucket.encode()).status == 200

    def copy(target: str, source: str) -> tuple[int, str | None]:
        r = check(a("PUT", target, headers={"x-amz-copy-source": source}))
        return r.status, r.code

    denied = (403, "AccessDenied")
    assert copy(f"/{mine}/stolen", f"/{theirs}/secret") == denied
    assert copy(f"/{mine}/stolen", f"{theirs}/secret") == denied  # without the leading /
    assert copy(f"/{mine}/stolen", f"/{ghost}/secret") == denied  # no word of existence
    assert copy(f"/{mine}/stolen", f"/{theirs}/missing") == denied
    assert copy(f"/{theirs}/planted", f"/{mine}/secret") == denied
    upload = _upload_id(a, f"/{mine}/mp")
    assert copy(f"/{mine}/mp?partNumber=1&uploadId={upload}", f"/{theirs}/secret") == denied
    for target in (f"/{mine}/stolen", f"/{theirs}/planted", f"/{mine}/mp"):
        assert admin("HEAD", target).status == 404, target
    assert admin("GET", f"/{theirs}/secret").body == b"only " + theirs.encode()
    # inside its own namespaces a copy works, as does a part copied from its own object
    assert copy(f"/{mine}/copied", f"/{mine}/secret") == (200, None)
    assert admin("GET", f"/{mine}/copied").body == b"only " + mine.encode()
    assert copy(f"/{mine}/mp?partNumber=1&uploadId={upload}", f"/{mine}/secret")[0] == 200
