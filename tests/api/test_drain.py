"""Drain (upstream-api.md §1.4): while an API process shuts down, run-creating routes answer 503
gateway_draining with Retry-After: 1; reads and open streams keep working."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from hermes_queue.api.app import create_app
from hermes_queue.api.state import STATE, DrainState
from hermes_queue.config import Settings
from hermes_queue.jobqueue.worker import WakeableWorker
from hermes_queue.keys import Keys


@contextlib.asynccontextmanager
async def draining_api(settings: Settings) -> AsyncIterator[tuple[TestClient, DrainState]]:
    """The API as serve.py builds it: with a drain flag the test can flip."""
    app = create_app(settings)
    client = TestClient(TestServer(app))
    await client.start_server()
    state = app[STATE].drain
    client.session.headers["Authorization"] = f"Bearer {settings.api.api_key}"
    try:
        yield client, state
    finally:
        await client.close()


def _chat() -> dict[str, object]:
    return {"messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/runs", {"input": "hi"}),
        ("/v1/chat/completions", _chat()),
        ("/api/sessions/s1/chat", {"message": "hi"}),
        ("/api/sessions/s1/chat/stream", {"message": "hi"}),
        ("/api/jobs/0123456789ab/run", {}),
    ],
)
async def test_run_creating_routes_answer_503_while_draining(
    settings: Settings, redis: object, path: str, body: dict[str, object]
) -> None:
    async with draining_api(settings) as (client, state):
        state.draining = True
        response = await client.post(path, json=body)
        assert response.status == 503
        assert response.headers["Retry-After"] == "1"
        error = (await response.json())["error"]
        assert error["code"] == "gateway_draining" and error["type"] == "server_error"


async def test_nothing_is_enqueued_and_reads_still_work(
    settings: Settings, keys: Keys, redis: object
) -> None:
    async with draining_api(settings) as (client, state):
        created = await client.post("/v1/runs", json={"input": "before"})
        run_id = (await created.json())["run_id"]
        state.draining = True
        refused = await client.post("/v1/runs", json={"input": "during"})
        assert refused.status == 503
        assert await redis.zcard(keys.queue) == 1  # type: ignore[attr-defined]
        assert (await client.get(f"/v1/runs/{run_id}")).status == 200
        assert (await client.get("/v1/models")).status == 200
        assert (await client.get("/health")).status == 200
        stop = await client.post(f"/v1/runs/{run_id}/stop")  # not run-creating
        assert stop.status == 200
        state.draining = False
        assert (await client.post("/v1/runs", json={"input": "after"})).status == 202


async def test_auth_comes_before_drain(settings: Settings) -> None:
    async with draining_api(settings) as (client, state):
        state.draining = True
        response = await client.post(
            "/v1/runs", json={"input": "hi"}, headers={"Authorization": "Bearer wrong"}
        )
        assert response.status == 401


async def test_open_stream_keeps_streaming_while_draining(
    settings: Settings, worker: WakeableWorker
) -> None:
    async with draining_api(settings.replace(echo_token_delay=0.02)) as (client, state):
        created = await client.post("/v1/runs", json={"input": "one two three four five"})
        run_id = (await created.json())["run_id"]
        async with client.get(f"/v1/runs/{run_id}/events") as stream:
            assert stream.status == 200
            state.draining = True
            body = await asyncio.wait_for(stream.read(), 20)
        assert b"run.completed" in body and body.endswith(b": stream closed\n\n")
