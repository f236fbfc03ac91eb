"""Real OS processes for end-to-end tests: API replicas and workers, started like a user would."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import redis

from hermes_queue.config import Settings, settings_env
from hermes_queue.keys import Keys
from hermes_queue.redis_server import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_QUEUE_")}
    env.update(settings_env(settings))
    env["PYTHONUNBUFFERED"] = "1"
    # Child processes import this checkout, whatever copy happens to be installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    stopped: bool = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def terminate(self, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode

    async def wait_for_log(self, text: str, within: float = 20) -> None:
        deadline = time.monotonic() + within
        while text not in self.log():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name} never logged {text!r}; log:\n{self.log()[-3000:]}"
                )
            if self.process.poll() is not None and text not in self.log():
                raise AssertionError(f"{self.name} exited; log:\n{self.log()[-3000:]}")
            await asyncio.sleep(0.05)


@dataclass
class Cluster:
    """A namespace's API replicas and workers, each a separate OS process."""

    settings: Settings
    procs: list[Proc] = field(default_factory=list)
    _logdir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="hq-e2e-"))

    def _spawn(
        self, name: str, args: list[str], settings: Settings, launcher: Sequence[str] = ()
    ) -> Proc:
        """``python -m hermes_queue <args>``, behind ``launcher`` (e.g. ``ip netns exec``)."""
        log_path = Path(self._logdir) / f"{name}-{len(self.procs)}.log"
        handle = log_path.open("wb")
        process = subprocess.Popen(
            [*launcher, sys.executable, "-m", "hermes_queue", *args],
            env=_env(settings),
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        proc = Proc(name, process, log_path)
        self.procs.append(proc)
        return proc

    async def start_api(self, **overrides: object) -> str:
        port = free_port()
        settings = self.settings.replace(port=port, **overrides)
        proc = self._spawn("api", ["api"], settings)
        url = f"http://127.0.0.1:{port}"
        await _wait_http(url + "/health", proc)
        return url

    async def start_worker(self, **overrides: object) -> Proc:
        proc = self._spawn("worker", ["worker"], self.settings.replace(**overrides))
        await proc.wait_for_log("ready (")
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.process.poll() is None:
                proc.resume()  # a paused process cannot handle SIGTERM
                proc.terminate(timeout=10)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.settings.redis_url)

    @property
    def keys(self) -> Keys:
        return Keys(self.settings.namespace)


async def _wait_http(url: str, proc: Proc, within: float = 20) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.process.poll() is not None:
                raise AssertionError(f"API exited early:\n{proc.log()[-3000:]}")
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"API never answered {url}:\n{proc.log()[-3000:]}")


class ProcessApi:
    """The calls tests make on aiohttp's ``TestClient`` (``await api.post(path, json=...)``),
    against an API process's URL. Bodies other than SSE are read at once, so every response
    gives its connection back without the test having to release it."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str) -> None:
        self.session = session
        self.base_url = base_url

    async def post(self, path: str, **kwargs: object) -> aiohttp.ClientResponse:
        return await self._send("POST", path, **kwargs)

    async def get(self, path: str, **kwargs: object) -> aiohttp.ClientResponse:
        return await self._send("GET", path, **kwargs)

    async def _send(self, method: str, path: str, **kwargs: object) -> aiohttp.ClientResponse:
        response = await self.session.request(method, self.base_url + path, **kwargs)  # type: ignore[arg-type]
        if response.content_type != "text/event-stream":
            await response.read()
        return response
