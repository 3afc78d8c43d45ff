"""kill -9 of a gateway right after one key was written, deleted and written again within one
segment: the restart serves the last acknowledged state of every key, and a key deleted last
stays deleted, whatever the eviction of the segments its older versions are in did meanwhile.

One ``s3kv serve`` process on moto, restarted with the same --node-id (the crash's
unfinished uploads are its own)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from tests.reliability.conftest import Report
from tests.support.gateway import Gateway, backend_store, gateway_client
from tests.support.s3server import MotoServer

ARGS = ["--segment-size", "10MiB", "--part-size", "5MiB", "--max-block-size", "5MiB",
        "--seal-after", "1", "--sync-interval", "0", "--node-id", "crash-versions"]


def _durable(client: Any) -> Any:
    def sealed(request: Any, **_: Any) -> None:
        request.headers["x-s3kv-durability"] = "sealed"
    client.meta.events.register("before-sign.s3.PutObject", sealed)
    return client


def _get(client: Any, key: str) -> bytes | None:
    try:
        return bytes(client.get_object(Bucket="versions", Key=key)["Body"].read())
    except ClientError as err:
        assert err.response["Error"]["Code"] == "NoSuchKey"
        return None


def test_kill9_after_overwrite_delete_overwrite_in_one_segment(
        s3_server: MotoServer, reliability_report: Report) -> None:
    gw = Gateway(backend_store(s3_server), ARGS, log_level="info")
    try:
        gw.start()
        plain = gateway_client(gw.endpoint)
        durable = _durable(gateway_client(gw.endpoint))
        plain.create_bucket(Bucket="versions")
        for key in ("k", "j", "m"):  # the first versions, sealed in a segment of their own
            durable.put_object(Bucket="versions", Key=key, Body=f"{key}1".encode())
        # one segment: k written, deleted, written again; j written again, then deleted;
        # m deleted, then written again; sealed by the last durable PUT
        plain.put_object(Bucket="versions", Key="k", Body=b"k2")
        plain.delete_object(Bucket="versions", Key="k")
        plain.put_object(Bucket="versions", Key="j", Body=b"j2")
        plain.delete_object(Bucket="versions", Key="j")
        plain.delete_object(Bucket="versions", Key="m")
        durable.put_object(Bucket="versions", Key="k", Body=b"k3")
        durable.put_object(Bucket="versions", Key="m", Body=b"m3")
        plain.put_object(Bucket="versions", Key="k", Body=b"k4")  # write-back: may be lost
        gw.kill()
        gw.start()
        after = gateway_client(gw.endpoint)
        got = {key: _get(after, key) for key in ("k", "j", "m")}
        held = got["k"] in (b"k3", b"k4") and got["j"] is None and got["m"] == b"m3"
        reliability_report.record(
            "crash", "kill -9 after overwrite, delete, overwrite of keys in one segment",
            faults=1, requests=14, wrong_bytes=0 if held else 1, held=held, note=repr(got))
        assert held, got
    finally:
        gw.cleanup()
