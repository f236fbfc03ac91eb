"""What the strict-client tests share: a live stack per backend, and the driver subprocess
(``strict_driver.py`` under Python 3.13) read line by line while its turns run."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from tests.support.fake_llm import FakeLLM
from tests.support.polling import eventually
from tests.support.processes import Cluster, Proc

DRIVER = Path(__file__).with_name("strict_driver.py")
Line = dict[str, Any]


@dataclass(frozen=True)
class Backend:
    """How a backend is asked for each behaviour (its markers) and what it answers."""

    name: str
    reply_prefix: str  # a plain turn's reply is this + the text without markers
    reasoning: str
    tool: str
    tool_name: str
    fail: str
    slow_tool: str  # a tool call that takes seconds (with side effects: not run again)
    length: str = "[length]"


ECHO = Backend(
    "echo", "Echo: ", "[think]", "[tool:search]", "search", "[fail]", "[tool:deploy] [slowtool:4]"
)
# [error:400]: the provider refuses the call, which Hermes does not retry: the turn fails.
HERMES = Backend(
    "hermes",
    "You said: ",
    "[reasoning]",
    "[toolcall:todo]",
    "todo",
    "[error:400]",
    "[terminal:sleep 4]",
)


@dataclass
class Turn:
    """One ``stream_chat_events`` call of the driver."""

    text: str
    session_id: str | None = None
    session_key: str | None = None
    close_after_deltas: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # more request body fields

    def plan(self) -> dict[str, Any]:
        request = {
            "model": "hermes-agent",
            "stream": True,
            "messages": [{"role": "user", "content": self.text}],
            **self.extra,
        }
        return {
            "request": request,
            "session_id": self.session_id,
            "session_key": self.session_key,
            "close_after_deltas": self.close_after_deltas,
        }


@dataclass
class TurnResult:
    response: Line | None
    events: list[Line]
    end: Line | None

    @property
    def text(self) -> str:
        return "".join(
            e["fields"]["text"] for e in self.events if e["type"] == "AssistantDeltaEvent"
        )

    @property
    def outcome(self) -> str | None:
        return None if self.end is None else self.end.get("outcome")

    @property
    def run_id(self) -> str | None:
        return None if self.response is None else self.response.get("run_id")

    def first_delta_at(self) -> float | None:
        return next((e["t"] for e in self.events if e["type"] == "AssistantDeltaEvent"), None)

    def tool_progress(self) -> list[tuple[str, str, str]]:
        """(tool_call_id, tool_name, status) of each tool progress event, in order."""
        return [
            (e["fields"]["tool_call_id"], e["fields"]["tool_name"], e["fields"]["status"])
            for e in self.events
            if e["type"] == "ToolProgressEvent"
        ]


def is_delta(line: Line) -> bool:
    return line.get("kind") == "event" and line.get("type") == "AssistantDeltaEvent"


def is_response(line: Line) -> bool:
    return line.get("kind") == "response"


class Driver:
    """The driver subprocess; ``lines`` are its JSON lines read so far."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Path) -> None:
        self.process = process
        self.stderr_path = stderr
        self.lines: list[Line] = []
        self.eof = False

    @classmethod
    async def start(cls, python: str, plan: dict[str, Any]) -> Driver:
        stderr = Path(tempfile.mkdtemp(prefix="hq-driver-")) / "stderr.txt"
        with stderr.open("wb") as handle:
            process = await asyncio.create_subprocess_exec(
                python,
                str(DRIVER),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=handle,
            )
        assert process.stdin is not None
        process.stdin.write(json.dumps(plan).encode())
        process.stdin.close()
        return cls(process, stderr)

    async def _read_line(self) -> bool:
        """Read one more line; False at end of output."""
        assert self.process.stdout is not None
        raw = await self.process.stdout.readline()
        if not raw:
            self.eof = True
            return False
        try:
            self.lines.append(json.loads(raw))
        except ValueError:
            self.lines.append({"kind": "raw", "text": raw.decode(errors="replace")})
        return True

    async def wait_for(self, check: Callable[[Line], bool], within: float, what: str) -> Line:
        """The first line (read or still to come) that ``check`` accepts."""
        deadline = time.monotonic() + within
        seen = 0
        while True:
            for line in self.lines[seen:]:
                if check(line):
                    return line
            seen = len(self.lines)
            remaining = deadline - time.monotonic()
            try:
                more = remaining > 0 and await asyncio.wait_for(self._read_line(), remaining)
            except TimeoutError:
                more = False
            if not more:
                raise AssertionError(f"the driver never reported {what}\n{self.report()}")

    async def finish(self, within: float) -> None:
        """Read to the end of the driver's output and reap it (killed if it overruns)."""
        try:
            async with asyncio.timeout(within):
                while await self._read_line():
                    pass
                await self.process.wait()
        except TimeoutError:
            await self.close()
            raise AssertionError(
                f"the driver did not finish in {within} s\n{self.report()}"
            ) from None

    async def close(self) -> None:
        """Kill the driver if it still runs (a test that failed midway), and reap it."""
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def report(self) -> str:
        lines = "\n".join(f"  {json.dumps(line)}" for line in _compact(self.lines)) or "  (none)"
        return (
            f"driver lines:\n{lines}\n"
            f"driver exit code: {self.process.returncode}\n"
            f"driver stderr:\n{self.stderr().strip() or '(empty)'}"
        )

    def turn(self, index: int) -> TurnResult:
        mine = [line for line in self.lines if line.get("turn") == index]
        response = next((line for line in mine if line["kind"] == "response"), None)
        end = next((line for line in mine if line["kind"] == "end"), None)
        return TurnResult(response, [line for line in mine if line["kind"] == "event"], end)

    def expect(self, condition: bool, what: str) -> None:
        """Fail with ``what`` and everything the driver said unless ``condition``."""
        if not condition:
            raise AssertionError(f"{what}\n{self.report()}")

    def assert_clean(self, turns: int) -> None:
        """The driver ran every turn, and the client raised nothing (no HermesProtocolError or
        any other exception), neither probing capabilities nor streaming."""
        errors = [line for line in self.lines if "error" in line]
        self.expect(not errors, f"the strict client raised: {[e['error'] for e in errors]}")
        self.expect(self.process.returncode == 0, "the driver exited with an error")
        ended = [self.turn(i).end is not None for i in range(turns)]
        self.expect(all(ended) and self.lines[-1:] == [{"kind": "done"}], "a turn never ended")
        capabilities = [line for line in self.lines if line.get("kind") == "capabilities"]
        self.expect(len(capabilities) == 1, "no capabilities probe result")


_RUNS = ("AssistantDeltaEvent", "KeepaliveEvent")  # event types shown as one line per run


def _compact(lines: list[Line]) -> list[Line]:
    """``lines`` with each run of consecutive deltas (or keepalives) of a turn as one line:
    ``count``, the joined ``text``, ``t`` first and last."""
    shown: list[Line] = []
    for line in lines:
        last = shown[-1] if shown else {}
        if (
            line.get("type") in _RUNS
            and last.get("type") == line["type"]
            and last.get("turn") == line.get("turn")
        ):
            first_t = last["t"][0] if isinstance(last["t"], list) else last["t"]
            text = last.get("fields", {}).get("text", "") + line["fields"].get("text", "")
            fields = {"text": text} if line["type"] == _RUNS[0] else {}
            count = last.get("count", 1) + 1
            shown[-1] = {**last, "count": count, "fields": fields, "t": [first_t, line["t"]]}
        else:
            shown.append(line)
    return shown


@dataclass
class Stack:
    """One API process and two worker processes on one backend, and the driver's interpreter."""

    backend: Backend
    cluster: Cluster
    url: str
    workers: list[Proc]
    session: aiohttp.ClientSession  # carries the bearer key
    python: str
    fake: FakeLLM | None = None
    drivers: list[Driver] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.cluster.settings.api.api_key

    def reply(self, text: str) -> str:
        """A plain turn's reply to ``text`` (markers and spacing dropped)."""
        if self.fake is not None:
            return self.fake.reply_for(text)
        words = [word for word in text.split() if not word.startswith("[")]
        return self.backend.reply_prefix + " ".join(words)

    def slow(self, text: str, seconds_per_token: float = 0.2) -> str:
        """``text`` asked for as a long turn: about 10 s at 0.2 s a token."""
        if self.fake is None:
            return f"{text} [slow:{seconds_per_token:g}]"
        self.fake.token_delay = seconds_per_token
        return f"{text} " + " ".join(f"word{i}" for i in range(50))

    async def drive(self, *turns: Turn) -> Driver:
        plan = {"base_url": self.url, "key": self.key, "turns": [t.plan() for t in turns]}
        driver = await Driver.start(self.python, plan)
        self.drivers.append(driver)
        return driver

    async def run_status(self, run_id: str) -> dict[str, Any]:
        async with self.session.get(f"{self.url}/v1/runs/{run_id}") as response:
            return dict(await response.json())

    async def stop(self, run_id: str) -> dict[str, Any]:
        async with self.session.post(f"{self.url}/v1/runs/{run_id}/stop") as response:
            assert response.status in (200, 202), await response.text()
            return dict(await response.json())

    async def worker_of(self, run_id: str) -> Proc:
        """The worker process running ``run_id``: its record names it (``host:pid:nonce``)."""

        async def worker_id() -> str:
            client = aioredis.Redis.from_url(self.cluster.settings.redis.url)
            try:
                raw = await client.hget(self.cluster.keys.run(run_id), "worker")
            finally:
                await client.aclose()
            return (raw or b"").decode()

        named = await eventually(worker_id, bool, within=10, what=f"a worker claiming {run_id}")
        pid = int(named.rsplit(":", 2)[1])
        for proc in self.workers:
            if proc.process.pid == pid:
                return proc
        raise AssertionError(f"no worker process of this stack runs {run_id} ({named!r})")

    async def transcript(self, session_id: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/sessions/{session_id}/messages?order=oldest&limit=500"
        async with self.session.get(url) as response:
            if response.status == 404:
                return []
            assert response.status == 200, await response.text()
            return list((await response.json())["data"])


def new_session() -> tuple[str, str]:
    """A fresh (session id, session key) pair, in the client's accepted alphabet."""
    nonce = uuid.uuid4().hex[:12]
    return f"strict-{nonce}", f"strict-client:{nonce}"
