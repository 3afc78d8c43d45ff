"""The least an aiohttp S3 front can do: no auth, no storage, bodies from memory.

- ``PUT /{bucket}/{key}``: stream the body in and drop it, hashing it when the request signs
  its payload (any SigV4-verifying server must); answer 200 with an ETag. ``PUT /{bucket}``
  (create bucket) is the same with an empty body;
- ``GET`` / ``HEAD /{bucket}/{key}``: the object's bytes as the ``s3kv bench`` load generator
  (warp/payload.py) wrote and verifies them, a window onto one seeded random buffer chosen by
  the key, written from that buffer without a copy; the size is the one the last PUT of the
  key sent (only sizes are kept, never bytes). Unknown keys are 404;
- the native API's bulk endpoints (s3kv/gateway/native.py, s3kv/frames.py): ``PUT /v1/{ns}``,
  ``POST /v1/{ns}/batch-put`` (reads the framed body's head for the keys and lengths, drops
  the blocks) and ``POST /v1/{ns}/batch-get`` (streams each block's record from the same
  buffer, then the end record).

benchmarks/gateway_floor.py and benchmarks/gateway_ceiling.py run it beside the gateway as the
framework's floor (:func:`sink_process`).

    python -m benchmarks.aiohttp_sink --port 9000
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from benchmarks.harness import ROOT, ServerError, free_port
from s3kv.frames import STREAM, block_record, end_record, read_doc
from tests.support.procgroup import exit_on_sigterm
from warp.config import DEFAULT_SEED
from warp.payload import PayloadSource, variant_of

_HEX64 = re.compile(r"[0-9a-f]{64}")
SIZES = web.AppKey("sizes", dict[str, int])
PAYLOAD = web.AppKey("payload", PayloadSource)


async def drain(request: web.Request) -> int:
    """Read the body piece by piece and drop it; its length. Hashed if the payload is signed."""
    digest = hashlib.sha256() if _HEX64.fullmatch(
        request.headers.get("x-amz-content-sha256", "")) else None
    n = 0
    while piece := await request.content.readany():
        n += len(piece)
        if digest is not None:
            digest.update(piece)
    return n


async def put_object(request: web.Request) -> web.StreamResponse:
    with hung_up():
        n = await drain(request)
        request.app[SIZES][request.path] = n
        return web.Response(headers={"ETag": f'"{n:032x}"'})
    return web.Response(status=499)  # nobody to answer


def hung_up() -> contextlib.suppress:
    """A client that hangs up mid-request (a load generator at its deadline) ends it quietly,
    without aiohttp's "Error handling request" traceback."""
    return contextlib.suppress(ConnectionError)


async def send_payload(resp: web.StreamResponse, src: PayloadSource, key: str,
                       size: int) -> None:
    for view in src.slices(variant_of(key), 0, size):
        await resp.write(view)


async def get_object(request: web.Request) -> web.StreamResponse:
    size = request.app[SIZES].get(request.path)
    if size is None:
        raise web.HTTPNotFound()
    resp = web.StreamResponse(headers={"ETag": f'"{size:032x}"'})
    resp.content_length = size
    with hung_up():
        await resp.prepare(request)
        if request.method == "GET":
            await send_payload(resp, request.app[PAYLOAD], request.match_info["key"], size)
        await resp.write_eof()
    return resp


async def bucket(request: web.Request) -> web.StreamResponse:
    await drain(request)
    return web.Response()


async def create_namespace(request: web.Request) -> web.StreamResponse:
    return web.json_response({"created": True})


async def batch_put(request: web.Request) -> web.StreamResponse:
    # the body's head: frames_head's document, as long as the batch needs (no record bound)
    blocks = (await read_doc(request.content, limit=1 << 30))["blocks"]
    ns = request.match_info["ns"]
    sizes = request.app[SIZES]
    for b in blocks:
        sizes[f"/v1/{ns}/{b['key']}"] = int(b["length"])
    with hung_up():
        await drain(request)
    return web.json_response({"stored": len(blocks)})


async def batch_get(request: web.Request) -> web.StreamResponse:
    keys = json.loads(await request.read())["keys"]
    ns = request.match_info["ns"]
    sizes, src = request.app[SIZES], request.app[PAYLOAD]
    resp = web.StreamResponse(headers={"Content-Type": STREAM})
    resp.enable_chunked_encoding()
    with hung_up():
        await resp.prepare(request)
        for key in keys:
            size = sizes.get(f"/v1/{ns}/{key}")
            await resp.write(block_record(key, size))
            if size is not None:
                await send_payload(resp, src, key, size)
        await resp.write(end_record(len(keys)))
        await resp.write_eof()
    return resp


def make_app() -> web.Application:
    app = web.Application(client_max_size=1 << 30)
    app[SIZES] = {}
    app[PAYLOAD] = PayloadSource(DEFAULT_SEED)
    app.router.add_put("/v1/{ns}", create_namespace)
    app.router.add_post("/v1/{ns}/batch-put", batch_put)
    app.router.add_post("/v1/{ns}/batch-get", batch_get)
    app.router.add_put("/{bucket}/{key:.+}", put_object)
    app.router.add_get("/{bucket}/{key:.+}", get_object)  # HEAD too
    app.router.add_route("*", "/{tail:.*}", bucket)  # create bucket and the rest: 200
    return app


@contextmanager
def sink_process() -> Iterator[tuple[str, int]]:
    """This server on a free loopback port, as a subprocess: (URL, pid)."""
    exit_on_sigterm()
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.aiohttp_sink", "--port",
                             str(port)], env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise ServerError(f"the aiohttp sink did not start (exit {proc.poll()})"
                                      ) from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="loopback port to listen on")
    args = parser.parse_args(argv)
    web.run_app(make_app(), host="127.0.0.1", port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
