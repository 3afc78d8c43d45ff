"""``s3kv agent``: runs sweep clients on this host for a remote coordinator (Warp's client mode).

HTTP API (JSON; ``Authorization: Bearer TOKEN`` when the agent has a token):

- ``GET  /v1/time``                -> ``{"time": wall seconds}`` (the coordinator's clock offset)
- ``POST /v1/jobs``  (a job)       -> ``{"id": ...}`` once the client process is set up
- ``POST /v1/jobs/ID/start``       ``{"start_at": wall seconds on this host}``
- ``GET  /v1/jobs/ID/events``      progress lines (JSON per line), then ``{"exit": status}``
- ``POST /v1/jobs/ID/stop``        interrupt the client (it keeps its records)
- ``GET  /v1/jobs/ID/records``     the record file (.csv.zst)
- ``DELETE /v1/jobs/ID``           forget the job and its files
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from s3kv.clock import now_s
from s3kv.errors import ConfigError
from warp.client import Job
from warp.sweep.handles import LocalClient

DEFAULT_PORT = 7761
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class _Entry:
    client: LocalClient
    records: Path
    exit: int | None = None


class Agent:
    def __init__(self, token: str = "", workdir: Path | None = None) -> None:
        self.token = token
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="s3kv-agent-"))
        self.jobs: dict[str, _Entry] = {}

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth], client_max_size=1 << 20)
        app.router.add_get("/v1/time", self.time)
        app.router.add_post("/v1/jobs", self.create)
        app.router.add_post("/v1/jobs/{id}/start", self.start)
        app.router.add_get("/v1/jobs/{id}/events", self.events)
        app.router.add_post("/v1/jobs/{id}/stop", self.stop)
        app.router.add_get("/v1/jobs/{id}/records", self.records)
        app.router.add_delete("/v1/jobs/{id}", self.delete)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.token and not secrets.compare_digest(
                request.headers.get("Authorization", ""), f"Bearer {self.token}"):
            return web.json_response({"error": "bad or missing token"}, status=401)
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except (ValueError, TypeError, KeyError, ConfigError) as exc:  # the request's
            return web.json_response({"error": f"bad request: {type(exc).__name__}: {exc}"},
                                     status=400)
        except Exception as exc:  # reported to the coordinator, not fatal to the agent
            return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=500)

    def _entry(self, request: web.Request) -> _Entry:
        entry = self.jobs.get(request.match_info["id"])
        if entry is None:
            raise web.HTTPNotFound(text=json.dumps({"error": "no such job"}),
                                   content_type="application/json")
        return entry

    async def time(self, request: web.Request) -> web.Response:
        return web.json_response({"time": now_s()})

    async def create(self, request: web.Request) -> web.Response:
        doc = await request.json()
        if not isinstance(doc, dict):
            raise TypeError("a job is a JSON object")
        job = Job.from_dict(doc)
        job_id = secrets.token_hex(6)
        jobdir = self.workdir / job_id
        jobdir.mkdir(parents=True)
        records = jobdir / "records.csv.zst"
        job = Job(job.config, str(records), job.comment)
        client = LocalClient(job_id)
        self.jobs[job_id] = _Entry(client, records)
        await client.launch(job)
        return web.json_response({"id": job_id})

    async def start(self, request: web.Request) -> web.Response:
        entry = self._entry(request)
        body = await request.json()
        await entry.client.start(float(body["start_at"]))
        return web.json_response({"ok": True})

    async def events(self, request: web.Request) -> web.StreamResponse:
        entry = self._entry(request)
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        try:
            async for event in entry.client.events():
                await resp.write((json.dumps(event) + "\n").encode())
        except (asyncio.CancelledError, ConnectionError):
            await entry.client.stop()  # the coordinator went away: stop, keep the records
            raise
        entry.exit = await entry.client.finish(entry.records)
        await entry.client.close()
        await resp.write((json.dumps({"exit": entry.exit}) + "\n").encode())
        await resp.write_eof()
        return resp

    async def stop(self, request: web.Request) -> web.Response:
        await self._entry(request).client.stop()
        return web.json_response({"ok": True})

    async def records(self, request: web.Request) -> web.StreamResponse:
        entry = self._entry(request)
        if entry.exit is None:
            entry.exit = await entry.client.finish(entry.records)
            await entry.client.close()
        return web.FileResponse(entry.records)

    async def delete(self, request: web.Request) -> web.Response:
        entry = self._entry(request)
        job_id = request.match_info["id"]
        del self.jobs[job_id]
        await entry.client.close()
        shutil.rmtree(self.workdir / job_id, ignore_errors=True)
        return web.json_response({"ok": True})


async def serve(host: str, port: int, token: str = "") -> None:
    agent = Agent(token)
    runner = web.AppRunner(agent.app())
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:  # the port is taken, or the address is not this host's
        await runner.cleanup()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}; choose another "
                          "--listen") from None
    print(f"s3kv agent listening on http://{host}:{port} (work dir {agent.workdir})", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        for entry in agent.jobs.values():
            with contextlib.suppress(Exception):
                await entry.client.stop()
        await runner.cleanup()
