"""A reader of a run that Redis lost (restarted without persistence) is told so promptly, with
an explicit error frame, instead of waiting for the periodic check of idle streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from hermes_queue.api import feed
from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from hermes_queue.redisio.embedded import EmbeddedRedis
from tests.support.inprocess import running_api


@pytest.fixture
def servers() -> Iterator[list[EmbeddedRedis]]:
    """A private Redis (restarted by the test: every server started goes in the list)."""
    started = [EmbeddedRedis.start()]
    try:
        yield started
    finally:
        for server in started:
            server.stop()


async def test_reader_of_a_run_lost_in_a_restart_gets_an_error_frame(
    settings: Settings, servers: list[EmbeddedRedis], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed, "RECORD_CHECK_EVERY", 10_000)  # only the reconnect may tell
    settings = settings.replace(redis_url=servers[0].url)
    async with running_api(settings) as api:
        run_id = (await (await api.post("/v1/runs", json={"input": "hi"})).json())["run_id"]
        response = await api.get(f"/v1/runs/{run_id}/events")
        frames = iter_sse(response)
        assert (await anext(frames)).comment == "keepalive"  # no worker: the run waits
        servers[0].stop()
        servers.append(EmbeddedRedis.start(port=servers[0].port))  # back, without the run

        async def until_error() -> tuple[str, dict[str, object]]:
            async for frame in frames:
                if frame.data:
                    return frame.event, frame.json()
            raise AssertionError("the stream ended without an error frame")

        # Long before RECORD_CHECK_EVERY keepalives: the hub's reconnect made it check.
        name, payload = await asyncio.wait_for(until_error(), 10 * settings.api.keepalive_seconds)
        rest = [frame.comment async for frame in frames]
    assert name == "stream.error" and payload["event"] == "stream.error"
    assert payload["run_id"] == run_id
    assert payload["error"] == {
        "message": "This run no longer exists in Redis: no event can follow",
        "type": "server_error",
        "code": "run_lost",
    }
    assert rest == ["run not found"]


async def test_a_chat_stream_whose_run_was_lost_ends_in_its_own_error_row(
    settings: Settings, servers: list[EmbeddedRedis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chat dialect has no ``stream.error`` frame: its strict clients refuse any named
    frame but tool progress, and any comment after ``[DONE]``."""
    monkeypatch.setattr(feed, "RECORD_CHECK_EVERY", 10_000)
    settings = settings.replace(redis_url=servers[0].url)
    body = {"stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with running_api(settings) as api:
        response = await api.post("/v1/chat/completions", json=body)
        # No worker: the run waits, the stream keeps alive (the OpenAI dialects' keepalive is a
        # lone comment line, api/http/sse.py KEEPALIVE_LINE).
        assert await response.content.readline() == b": keepalive\n"
        frames = iter_sse(response)
        servers[0].stop()
        servers.append(EmbeddedRedis.start(port=servers[0].port))
        rest = await asyncio.wait_for(_collect(frames), 10 * settings.api.keepalive_seconds)
    data = [frame for frame in rest if frame.data]
    assert [frame.event for frame in data] == ["", ""]  # unnamed frames
    last = data[0].json()
    assert last["choices"][0]["finish_reason"] == "error"
    assert last["hermes"]["failed"] is True and last["hermes"]["error_code"] == "run_lost"
    assert data[1].data == "[DONE]" and rest[-1] is data[1]  # nothing after [DONE]


async def _collect(frames: AsyncIterator[Any]) -> list[Any]:
    return [frame async for frame in frames]
