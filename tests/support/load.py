"""A steady, bounded load of runs with SSE readers, and what each reader saw: for the failure
tests (failover, separate hosts) and the chaos benchmark.

Each of ``clients`` loops posts a run every ``interval`` seconds (the API replicas in turn),
whatever happens to the others; a reader task follows each run from the same or the other
replica, resuming with ``Last-Event-ID`` on the other replica after a dropped connection or a
5xx, and every second reader drops its connection on purpose after a few frames. A
:class:`RunTrace` keeps every frame a reader got, so :meth:`RunTrace.problems` can say what a
user would have noticed: no terminal or error frame, an id seen twice, events lost without a
``stream.gap`` / ``run.restarted`` saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from hermes_queue.client import TERMINAL, iter_sse
from tests.support.polling import NeverHeld, eventually

ERROR_EVENT = "stream.error"
WARNINGS = frozenset({"stream.gap", "run.restarted", "run.resumed"})


def _id_key(frame_id: str) -> tuple[int, int]:
    ms, _, seq = frame_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass
class RunTrace:
    """One accepted run and everything its reader got."""

    run_id: str
    api: str
    created_at: float  # time.monotonic() when the creation answered
    frames: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    resumes: int = 0
    end: str = ""  # "terminal", "error", or why the reader gave up
    first_at: float | None = None  # time.monotonic() of the first frame
    ended_at: float | None = None  # time.monotonic() of the terminal or error frame
    record: dict[str, Any] = field(default_factory=dict)  # GET /v1/runs/{id} at the end
    record_answer: str = ""  # the last answer to that GET (status and code, or the error)

    @property
    def events(self) -> list[str]:
        return [str(payload.get("event")) for _, payload in self.frames]

    @property
    def terminal(self) -> dict[str, Any] | None:
        for _, payload in reversed(self.frames):
            if payload.get("event") in TERMINAL:
                return dict(payload)
        return None

    def warned(self) -> bool:
        return any(name in WARNINGS for name in self.events)

    def duplicates(self) -> int:
        """Frames whose id is not after the previous one (an event delivered twice)."""
        ids = [_id_key(frame_id) for frame_id, _ in self.frames if frame_id]
        return sum(1 for before, after in itertools.pairwise(ids) if after <= before)

    def _standing_text(self) -> list[tuple[str, str]]:
        """The reply text this reader was shown that still stands: a ``run.restarted``
        supersedes all before it, a ``run.resumed`` what follows its ``valid_through``."""
        text: list[tuple[str, str]] = []
        for frame_id, payload in self.frames:
            event = payload.get("event")
            if event == "message.delta":
                text.append((frame_id, str(payload.get("delta", ""))))
            elif event == "run.restarted":
                text = []
            elif event == "run.resumed":
                through = _id_key(str(payload.get("valid_through") or "0-0"))
                text = [(fid, d) for fid, d in text if _id_key(fid) <= through]
        return text

    def problems(self) -> list[str]:
        """What is wrong with this reader's view, as a user would notice it."""
        found = []
        if self.end not in ("terminal", "error"):
            found.append(f"reader ended without a terminal or error frame ({self.end})")
        if self.duplicates():
            found.append(f"{self.duplicates()} frame id(s) repeated or out of order")
        final = self.terminal
        if (
            final is not None
            and final["event"] == "run.completed"
            and "stream.gap" not in self.events
        ):
            text = "".join(delta for _, delta in self._standing_text())
            if text != final.get("output"):
                found.append(f"deltas {text!r} != output {final.get('output')!r}, unannounced")
        return found


@dataclass
class Load:
    """``clients`` loops creating runs against ``urls`` until ``stop`` or ``max_runs``."""

    session: aiohttp.ClientSession
    urls: list[str]
    text: str = "steady load " + " ".join(f"w{i}" for i in range(16)) + " [slow:0.05]"
    clients: int = 4
    interval: float = 1.0  # seconds between two creations of one client
    max_runs: int = 200
    request_timeout: float = 20.0
    follow_timeout: float = 120.0
    # More fields of every run's body (a ``webhook``, say).
    fields: dict[str, Any] = field(default_factory=dict)
    accepted: list[RunTrace] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    # Answers other than 200 to the readers' requests (they resume on the other replica).
    read_refused: Counter[str] = field(default_factory=Counter)
    hangs: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _followers: set[asyncio.Task[None]] = field(default_factory=set)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._client(i)) for i in range(self.clients)]

    async def finish(self, within: float = 120.0) -> None:
        """Stop creating runs and wait for every reader to end."""
        self.stop.set()
        await asyncio.wait_for(asyncio.gather(*self._tasks), within)

    async def cancel(self) -> None:
        self.stop.set()
        for task in [*self._tasks, *self._followers]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._followers, return_exceptions=True)

    def completed_since(self, moment: float) -> int:
        return sum(
            1
            for t in self.accepted
            if t.created_at >= moment
            and t.end == "terminal"
            and (t.terminal or {}).get("event") == "run.completed"
        )

    async def wait_for_completed(
        self, count: int, since: float = 0.0, within: float = 60.0
    ) -> None:
        await eventually(
            lambda: self.completed_since(since),
            lambda completed: completed >= count,
            within=within,
            what=lambda: f"{count} runs completed (refused: {dict(self.refused)})",
        )

    async def _client(self, index: int) -> None:
        """Create a run every ``interval`` seconds whatever happens to the others (a steady
        load), each followed by a reader task of its own."""
        rng = random.Random(index)
        turn = index
        while not self.stop.is_set() and len(self.accepted) < self.max_runs:
            turn += 1
            started = time.monotonic()
            api = self.urls[turn % len(self.urls)]
            reader = self.urls[(turn + index) % len(self.urls)]
            trace = await self._create(api)
            if trace is not None:
                drop_after = rng.randint(1, 12) if turn % 2 else None
                task = asyncio.create_task(self.follow(trace, reader, drop_after))
                self._followers.add(task)
                task.add_done_callback(self._followers.discard)
            pause = self.interval - (time.monotonic() - started)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, pause)):
                    await self.stop.wait()
        if self._followers:
            await asyncio.gather(*list(self._followers))

    async def _create(self, api: str) -> RunTrace | None:
        try:
            async with asyncio.timeout(self.request_timeout):
                sent = {"input": self.text, **self.fields}
                async with self.session.post(api + "/v1/runs", json=sent) as resp:
                    body = await resp.json(content_type=None)
                    status = resp.status
        except TimeoutError:
            self.hangs += 1
            return None
        except aiohttp.ClientError as exc:
            self.refused[f"connection: {type(exc).__name__}"] += 1
            return None
        if status in (200, 201, 202):
            trace = RunTrace(str(body["run_id"]), api, time.monotonic())
            self.accepted.append(trace)
            return trace
        code = (body.get("error") or {}).get("code") if isinstance(body, dict) else None
        self.refused[f"{status} {code}"] += 1
        return None

    async def follow(self, trace: RunTrace, base: str, drop_after: int | None = None) -> None:
        """Read ``trace``'s events to its terminal (or error) frame, resuming on the other
        replica after a drop; gives up after ``follow_timeout``."""
        cursor: str | None = None
        deadline = time.monotonic() + self.follow_timeout
        while time.monotonic() < deadline:
            headers = {"Last-Event-ID": cursor} if cursor else {}
            try:
                async with self.session.get(
                    f"{base}/v1/runs/{trace.run_id}/events",
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=30),
                ) as response:
                    if 400 <= response.status < 500:
                        trace.end = f"HTTP {response.status}"
                        return
                    if response.status != 200:
                        self.read_refused[await _answer(response)] += 1
                    if response.status == 200:
                        async for frame in iter_sse(response):
                            if frame.comment and frame.comment not in (
                                "keepalive",
                                "stream closed",
                            ):
                                trace.end = f"comment {frame.comment!r}"
                                return
                            if not frame.data:
                                continue
                            payload = frame.json()
                            trace.first_at = trace.first_at or time.monotonic()
                            trace.frames.append((frame.id, payload))
                            cursor = frame.id or cursor
                            if (
                                payload.get("event") in TERMINAL
                                or payload.get("event") == ERROR_EVENT
                            ):
                                trace.end = "terminal" if payload["event"] in TERMINAL else "error"
                                trace.ended_at = time.monotonic()
                                return
                            if drop_after is not None and len(trace.frames) >= drop_after:
                                drop_after = None
                                break  # leaving the block drops the connection
            except (aiohttp.ClientError, TimeoutError):
                pass
            trace.resumes += 1
            base = self.urls[(self.urls.index(base) + 1) % len(self.urls)]
            await asyncio.sleep(0.1)
        trace.end = "gave up"

    async def settle_records(self, within: float = 60.0) -> None:
        """Read every accepted run's record until it is terminal (or ``within`` passes)."""
        deadline = time.monotonic() + within

        def settled(status: object) -> bool:  # typed: it gives mypy eventually's T
            return status in ("completed", "failed", "cancelled")

        for trace in self.accepted:
            with contextlib.suppress(NeverHeld):  # record_problems() tells what is left
                await eventually(
                    lambda trace=trace: self._read_record(trace),
                    settled,
                    within=max(0.0, deadline - time.monotonic()),
                    every=0.1,
                )

    async def _read_record(self, trace: RunTrace) -> object:
        """``GET /v1/runs/{id}`` into ``trace``; the record's status so far."""
        try:
            url = f"{trace.api}/v1/runs/{trace.run_id}"
            async with self.session.get(url) as response:
                body = await response.json(content_type=None)
                error = body.get("error", "") if isinstance(body, dict) else body
                trace.record_answer = f"{response.status} {error}"
                if response.status == 200:
                    trace.record = body
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            trace.record_answer = repr(exc)
        return trace.record.get("status")


async def _answer(response: aiohttp.ClientResponse) -> str:
    """``503 redis_unavailable``: an error answer's status and code."""
    try:
        body = await response.json(content_type=None)
    except (aiohttp.ClientError, ValueError):
        body = None
    code = (body.get("error") or {}).get("code") if isinstance(body, dict) else None
    return f"{response.status} {code}"


def record_problems(trace: RunTrace) -> list[str]:
    """What is wrong with an accepted run's final record."""
    status = trace.record.get("status")
    if status == "completed":
        return []
    if status in ("failed", "cancelled"):
        explained = trace.record.get("reason") or (trace.terminal or {}).get("reason")
        return [] if explained else [f"{status} without a reason"]
    return [f"record ended {status or 'missing'} (last answer: {trace.record_answer})"]
