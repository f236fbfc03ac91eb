"""A turn nobody reads any more never makes the next turn of its session wait (issue 21 §4,
docs/compatibility.md "Abandoned turns"): the request that started it reads it; when its client
closes the connection (and no one else reads the run) the next turn supersedes it, which stops
it, stores its reply as far as it went, and starts. A client that keeps reading keeps its turn.

The API runs as every API process serves it (``api_runner``, a real socket), so a closed
connection is noticed as production notices it, not through the test server's cancellation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from hermes_queue.api.app import create_app
from hermes_queue.api.server import api_runner
from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from tests.support.inprocess import running_worker
from tests.support.polling import eventually

# One token, then a pause longer than the test may last: only superseding ends this turn.
SILENT = "long one [slow:600]"


@dataclass
class Api:
    url: str
    session: aiohttp.ClientSession

    async def post(self, path: str, **kwargs: Any) -> aiohttp.ClientResponse:
        return await self.session.post(self.url + path, **kwargs)

    async def status(self, run_id: str) -> str:
        async with self.session.get(f"{self.url}/v1/runs/{run_id}") as response:
            return str((await response.json())["status"])

    async def messages(self, session_id: str) -> list[dict[str, Any]]:
        async with self.session.get(f"{self.url}/api/sessions/{session_id}/messages") as got:
            return list((await got.json())["data"])


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    # Keepalives far apart: a closed connection must be noticed without a write to it.
    settings = settings.replace(keepalive_seconds=300.0)
    runner = api_runner(create_app(settings), settings.api)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    headers = {"Authorization": f"Bearer {settings.api.api_key}"}
    try:
        async with running_worker(settings), aiohttp.ClientSession(headers=headers) as session:
            assert (await session.post(f"{site.name}/api/sessions", json={"id": "s1"})).ok
            yield Api(site.name, session)
    finally:
        await runner.cleanup()


async def first_delta(response: aiohttp.ClientResponse) -> str:
    async for frame in iter_sse(response):
        if frame.event == "assistant.delta":
            return str(frame.json()["delta"])
    raise AssertionError("the stream ended before any text")


async def start_silent_turn(api: Api) -> tuple[aiohttp.ClientResponse, str]:
    response = await api.post("/api/sessions/s1/chat/stream", json={"message": SILENT})
    assert response.status == 200
    await first_delta(response)
    return response, response.headers["X-Hermes-Run-Id"]


async def test_a_closed_stream_is_superseded_by_the_next_turn(api: Api) -> None:
    dropped, first = await start_silent_turn(api)
    dropped.close()  # the user stopped reading
    # Session chat refuses a second turn while one runs (``reject``); not behind a turn
    # nobody reads.
    answer = await api.post("/api/sessions/s1/chat", json={"message": "next"})
    assert answer.status == 200, await answer.text()
    assert (await answer.json())["message"]["content"] == "Echo: next (turn 2)"
    assert await api.status(first) == "cancelled"
    rows = await api.messages("s1")
    assert [(m["role"], m["finish_reason"]) for m in rows] == [
        ("user", None),
        ("assistant", "interrupted"),
        ("user", None),
        ("assistant", None),
    ]
    assert rows[1]["content"] == "Echo: "  # what its reader was shown before it left


async def test_a_turn_still_read_keeps_the_session_busy(api: Api) -> None:
    reading, first = await start_silent_turn(api)
    try:
        refused = await api.post("/api/sessions/s1/chat", json={"message": "next"})
        assert refused.status == 409
        assert (await refused.json())["error"]["run_id"] == first
        assert await api.status(first) == "running"
    finally:
        reading.close()


async def test_another_reader_keeps_a_dropped_turn(api: Api) -> None:
    """hermes-webui may drop the chat stream and follow the run on ``/v1/runs/{id}/events``."""
    dropped, first = await start_silent_turn(api)
    follower = await api.session.get(f"{api.url}/v1/runs/{first}/events")
    assert follower.status == 200
    try:
        dropped.close()
        queued = await api.post(
            "/api/sessions/s1/chat/stream",
            json={"message": "next", "multitask_strategy": "enqueue"},
        )
        second = queued.headers["X-Hermes-Run-Id"]
        await eventually(lambda: api.status(second), lambda s: s == "queued", what="queued")
        assert await api.status(first) == "running"  # still read: it is waited for
        queued.close()
    finally:
        follower.close()


async def test_a_parked_turn_starts_once_the_turn_ahead_loses_its_last_reader(api: Api) -> None:
    """Checked again on every reaper pass, not only when a turn arrives: the turn ahead was
    still read when the next one was parked behind it, and its reader leaves afterwards."""
    reading, first = await start_silent_turn(api)
    waiting = await api.post(
        "/api/sessions/s1/chat/stream", json={"message": "next", "multitask_strategy": "enqueue"}
    )
    second = waiting.headers["X-Hermes-Run-Id"]
    assert await api.status(second) == "queued"
    reading.close()
    assert await first_delta(waiting) == "Echo: "  # it runs: the turn ahead was stopped
    assert await api.status(first) == "cancelled"
    waiting.close()
