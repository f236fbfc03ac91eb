"""Real OS processes: API replicas and workers started as a user starts them (``python -m
hermes_queue api|worker``), for the end-to-end tests and the benchmarks alike.

Every child imports this checkout (its root first on ``PYTHONPATH``) and runs in the cluster's
log directory, so a source tree exported elsewhere (``git archive``) and run from its own root
runs its own code on both sides.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import redis

from hermes_queue.config import Settings, settings_env
from hermes_queue.keys import Keys
from hermes_queue.redisio.embedded import free_port
from tests.support.polling import Probe, eventually

REPO_ROOT = Path(__file__).resolve().parents[2]
LOG_TAIL = 3000  # characters of a process's log quoted when it fails to start


def child_env(
    settings: Settings | None = None,
    *,
    strip: tuple[str, ...] = ("HERMES_QUEUE_",),
    checkout: bool = True,
    **extra: str,
) -> dict[str, str]:
    """This environment without the variables named with a prefix in ``strip``, then
    ``settings`` as variables (when given) and ``extra``; with ``checkout``, this checkout first
    on ``PYTHONPATH`` (child processes import it, whatever copy happens to be installed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(strip)}
    if settings is not None:
        env.update(settings_env(settings))
    env.update(extra, PYTHONUNBUFFERED="1")
    if checkout:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def terminate(process: subprocess.Popen[bytes], timeout: float = 15) -> int:
    """SIGTERM ``process`` (unless it ended), then :func:`reap` it; its exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    return reap(process, timeout)


def reap(process: subprocess.Popen[bytes], timeout: float = 15) -> int:
    """Wait up to ``timeout`` s for ``process`` to end, then SIGKILL it; its exit code."""
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
    return process.returncode


# How long a process start may take before a test gives up on it. A start is CPU-bound (a
# hermes-backend worker imports hermes-agent, ~2 s of CPU alone) and slows with the machine's
# load: under a two-core CPU hog with other suites running, hermes workers took over 20 s. The
# waits fail at once when the process exits, so this bound is only a hang guard, never a
# speed expectation.
START_WITHIN = 60.0


def starts_processes(count: int) -> pytest.MarkDecorator:
    """The hang guard of a test that starts ``count`` processes one after another (a kill test
    starts a worker after another is dead): each start may take up to :data:`START_WITHIN` on a
    loaded machine, so the suite's 60 s per test would fail it while nothing hangs."""
    return pytest.mark.timeout(int(count * START_WITHIN + 60))


async def wait_http(
    url: str,
    process: subprocess.Popen[bytes],
    what: str,
    *,
    log: Callable[[], str] = lambda: "",
    within: float = START_WITHIN,
) -> None:
    """Await ``GET url`` answering 200; fail at once if ``process`` exits, with ``log()``'s tail."""
    async with aiohttp.ClientSession() as session:

        async def answers() -> bool:
            if process.poll() is not None:
                tail = log()[-LOG_TAIL:]
                raise AssertionError(f"{what} exited ({process.returncode}); log:\n{tail}")
            try:
                async with session.get(url) as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        probe: Probe[bool] = answers  # one of Probe's two forms, so that mypy infers its T
        await eventually(
            probe,
            within=within,
            what=lambda: f"{what} answering {url}; log:\n{log()[-LOG_TAIL:]}",
        )


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def errors(self) -> list[str]:
        """Each ERROR (or CRITICAL) it logged, one line: the message and the exception its
        traceback ended with (the last unindented line before the next log line). A failing
        test puts these first in its message: a log's tail is cut, and an error of minutes ago
        is not in it."""
        found: list[str] = []
        message, exception = "", ""
        for line in [*self.log().splitlines(), "0000-"]:  # a last "log line" closes the last
            if line[:4].isdigit() and line[4:5] == "-":  # a new log line
                if message:
                    cause = f" <- {exception}" if exception else ""
                    found.append(f"{self.name}: {message}{cause}")
                level = line.split(" ", 3)[2:3]  # "<date> <time> LEVEL logger [context] …"
                message = line.split("] ", 1)[-1] if level in (["ERROR"], ["CRITICAL"]) else ""
                exception = ""
            elif message and line.strip() and not line.startswith(" "):
                exception = line.strip()  # a traceback's last unindented line is its exception
        return found

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def terminate(self, timeout: float = 15) -> int:
        return terminate(self.process, timeout)

    async def wait_for_log(self, text: str, within: float = 20) -> None:
        def logged() -> bool:
            if text in self.log():
                return True
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited; log:\n{self.log()[-LOG_TAIL:]}")
            return False

        await eventually(
            logged,
            within=within,
            what=lambda: f"{self.name} logging {text!r}; log:\n{self.log()[-LOG_TAIL:]}",
        )


@dataclass
class Cluster:
    """A namespace's API replicas and workers, each a separate OS process."""

    settings: Settings
    procs: list[Proc] = field(default_factory=list)
    logdir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="hq-e2e-"))

    def spawn(
        self, name: str, args: list[str], settings: Settings, launcher: Sequence[str] = ()
    ) -> Proc:
        """``python -m hermes_queue <args>``, behind ``launcher`` (e.g. ``ip netns exec``)."""
        log_path = Path(self.logdir) / f"{name}-{len(self.procs)}.log"
        with log_path.open("wb") as handle:
            process = subprocess.Popen(
                [*launcher, sys.executable, "-m", "hermes_queue", *args],
                env=child_env(settings),
                cwd=self.logdir,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        proc = Proc(name, process, log_path)
        self.procs.append(proc)
        return proc

    async def start_api(self, **overrides: object) -> str:
        """An API process on a free loopback port, answering ``/health``; its base URL."""
        url, _proc = await self.start_api_process(**overrides)
        return url

    async def start_api_process(self, **overrides: object) -> tuple[str, Proc]:
        port = free_port()
        proc = self.spawn("api", ["api"], self.settings.replace(port=port, **overrides))
        url = f"http://127.0.0.1:{port}"
        await wait_http(url + "/health", proc.process, "the API", log=proc.log)
        return url, proc

    async def start_worker(self, **overrides: object) -> Proc:
        """A worker process, once it logged that it is ready (at log level INFO or lower)."""
        proc = self.spawn("worker", ["worker"], self.settings.replace(**overrides))
        await proc.wait_for_log("ready (", within=START_WITHIN)
        return proc

    def stop_all(self, timeout: float = 10) -> None:
        """SIGTERM every live process at once, then reap each (SIGKILL after ``timeout`` s)."""
        live = [proc for proc in self.procs if proc.process.poll() is None]
        for proc in live:
            proc.resume()  # a paused process cannot handle SIGTERM
            proc.process.send_signal(signal.SIGTERM)
        for proc in live:
            reap(proc.process, timeout)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.settings.redis.url)

    @property
    def keys(self) -> Keys:
        return Keys(self.settings.redis.namespace)


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
