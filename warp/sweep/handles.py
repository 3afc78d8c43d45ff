"""Client processes of a sweep phase: local OS processes, or processes run by remote agents.

Both follow one protocol: launch (returns when the client is set up and ready), start at a
wall-clock time, stream progress events, stop (Ctrl-C), finish (records in place, exit status).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import tempfile
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from s3kv.clock import now_s
from s3kv.errors import S3KVError
from s3kv.procs import module_argv
from warp.client import Job

READY_TIMEOUT_S = 600.0  # the first GET phase may wait for nothing, later ones for no upload


class ClientFailed(S3KVError):
    code = "ClientFailed"


class ClientHandle(ABC):
    label: str

    @property
    def clock_offset_ns(self) -> int:
        """This client's clock minus the coordinator's: its records' times carry it."""
        return 0

    @abstractmethod
    async def launch(self, job: Job) -> None: ...

    @abstractmethod
    async def start(self, start_at: float) -> None: ...

    @abstractmethod
    def events(self) -> AsyncIterator[dict[str, Any]]: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def finish(self, records: Path) -> int:
        """Wait for the end, put the record file at ``records``, return the exit status."""

    @abstractmethod
    async def close(self) -> None:
        """Release the client (a local process is kept for later phases until this)."""


class LocalClient(ClientHandle):
    """A ``python -m warp.client`` child process, reused for every phase it takes part in."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self._exit = 0
        self._done = True

    async def _send(self, msg: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write((json.dumps(msg) + "\n").encode())
        await self._proc.stdin.drain()

    async def _recv(self) -> dict[str, Any] | None:
        assert self._proc is not None and self._proc.stdout is not None
        while line := await self._proc.stdout.readline():
            with contextlib.suppress(ValueError):
                msg: dict[str, Any] = json.loads(line)
                return msg
        return None

    async def launch(self, job: Job) -> None:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await asyncio.create_subprocess_exec(
                *module_argv("warp.client"), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=self._stderr)
        self._done, self._exit = False, 1
        await self._send({"job": job.to_dict()})
        async with asyncio.timeout(READY_TIMEOUT_S):
            msg = await self._recv()
        if msg is not None and "error" in msg:
            self._done = True
            raise ClientFailed(f"client {self.label}: {msg['error']}")
        if msg is None or not msg.get("ready"):
            raise ClientFailed(f"client {self.label} failed to set up: {self._stderr_tail()}")

    async def start(self, start_at: float) -> None:
        await self._send({"start_at": start_at})

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        while not self._done and (msg := await self._recv()) is not None:
            if msg.get("done"):
                self._done, self._exit = True, int(msg.get("exit", 1))
            yield msg

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None and not self._done:
            self._proc.send_signal(signal.SIGINT)

    async def finish(self, records: Path) -> int:
        async for _ in self.events():
            pass  # drain to the job's last line
        if not self._done:
            raise ClientFailed(f"client {self.label} exited during the phase: "
                               f"{self._stderr_tail()}")
        return self._exit

    async def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin is not None and not self._proc.stdin.is_closing():
                self._proc.stdin.close()
            try:
                async with asyncio.timeout(10):
                    await self._proc.wait()
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        self._stderr.close()

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:].strip()


class AgentClient(ClientHandle):
    """A client process run by ``s3kv agent`` on another host (see :mod:`warp.sweep.agent`)."""

    def __init__(self, label: str, address: str, token: str = "") -> None:
        self.label = label
        self.base = address if address.startswith("http") else f"http://{address}"
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session = aiohttp.ClientSession(headers=self._headers,
                                              timeout=aiohttp.ClientTimeout(total=None))
        self._id = ""
        self._offset = 0.0  # agent clock - our clock
        self._code = 1

    async def _json(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        async with self._session.request(method, self.base + path, json=body) as resp:
            data: dict[str, Any] = await resp.json(content_type=None)
            if resp.status != 200:
                raise ClientFailed(f"agent {self.base}: {data.get('error', resp.status)}")
            return data

    async def launch(self, job: Job) -> None:
        t0 = now_s()
        agent_time = float((await self._json("GET", "/v1/time"))["time"])
        self._offset = agent_time - (t0 + now_s()) / 2
        self._id = str((await self._json("POST", "/v1/jobs", job.to_dict()))["id"])

    @property
    def clock_offset_ns(self) -> int:
        return round(self._offset * 1e9)

    async def start(self, start_at: float) -> None:
        await self._json("POST", f"/v1/jobs/{self._id}/start",
                         {"start_at": start_at + self._offset})

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        async with self._session.get(f"{self.base}/v1/jobs/{self._id}/events") as resp:
            async for line in resp.content:
                if line.strip():
                    event: dict[str, Any] = json.loads(line)
                    if "exit" in event:
                        self._code = int(event["exit"])
                    yield event

    async def stop(self) -> None:
        if self._id:
            await self._json("POST", f"/v1/jobs/{self._id}/stop")

    async def finish(self, records: Path) -> int:
        try:
            async with self._session.get(f"{self.base}/v1/jobs/{self._id}/records") as resp:
                if resp.status != 200:
                    raise ClientFailed(f"agent {self.base}: no records ({resp.status})")
                with open(records, "wb") as fh:  # noqa: ASYNC230 - a small local file
                    async for chunk in resp.content.iter_chunked(1 << 20):
                        fh.write(chunk)
            await self._json("DELETE", f"/v1/jobs/{self._id}")
        finally:
            await self._session.close()
        return self._code

    async def close(self) -> None:
        await self._session.close()
