"""The least an aiohttp S3 front can do for a PUT: read the body, hash it when the request
signs its payload (any SigV4-verifying server must), answer 200 with an ETag. No auth, no
storage. benchmarks/gateway_floor.py runs it beside the gateway as the framework's floor.

    python -m benchmarks.aiohttp_sink --port 9000
"""

from __future__ import annotations

import argparse
import hashlib
import re

from aiohttp import web

_HEX64 = re.compile(r"[0-9a-f]{64}")


async def handle(request: web.Request) -> web.StreamResponse:
    if request.method != "PUT":
        return web.Response()
    body = await request.read()
    if _HEX64.fullmatch(request.headers.get("x-amz-content-sha256", "")):
        hashlib.sha256(body).digest()
    return web.Response(headers={"ETag": f'"{len(body):032x}"'})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="loopback port to listen on")
    args = parser.parse_args(argv)
    app = web.Application(client_max_size=1 << 30)
    app.router.add_route("*", "/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
