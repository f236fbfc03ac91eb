"""Run endpoints against an in-process API and worker on a real Redis."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from hermes_queue.api.app import create_app
from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from hermes_queue.workers.worker import build_worker


async def read_all(api: TestClient, run_id: str, **headers: str) -> list[tuple[str, Any]]:
    response = await api.get(f"/v1/runs/{run_id}/events", headers=headers)
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/event-stream"
    return [(f.id or f.comment, f.json() if f.data else None) async for f in iter_sse(response)]


async def test_enqueue_wakes_an_idle_worker_without_waiting_for_its_poll(
    api: TestClient, settings: Settings
) -> None:
    # A 60 s poll interval: only the pub/sub wake-up can start the job within the test timeout.
    worker = build_worker(settings.replace(poll_seconds=60), handle_signals=False)
    task = asyncio.create_task(worker.main())
    try:
        await asyncio.wait_for(worker.listening.wait(), 10)
        run_id = (await (await api.post("/v1/runs", json={"input": "quick"})).json())["run_id"]
        frames = await asyncio.wait_for(read_all(api, run_id), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await worker.close()
    assert frames[-2][1]["event"] == "run.completed"
    assert frames[-1] == ("stream closed", None)


async def test_202_body_is_exactly_upstreams(api: TestClient) -> None:
    response = await api.post("/v1/runs", json={"input": "hi", "session_id": "my-session"})
    assert response.status == 202
    body = await response.json()
    assert set(body) == {"run_id", "status"} and body["status"] == "started"
    assert body["run_id"].startswith("run_") and len(body["run_id"]) == 36
    status = await (await api.get(f"/v1/runs/{body['run_id']}")).json()
    assert status["status"] == "queued" and status["session_id"] == "my-session"


async def test_history_and_instructions_reach_the_agent(api: TestClient, worker: Any) -> None:
    body = {
        "input": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Echo: first"},
            {"role": "user", "content": "second"},
        ],
        "instructions": "be brief",
    }
    run_id = (await (await api.post("/v1/runs", json=body)).json())["run_id"]
    frames = await read_all(api, run_id)
    assert frames[-2][1]["output"] == "Echo: second (turn 2)"


async def test_keepalive_comments_while_waiting(api: TestClient, settings: Settings) -> None:
    # No worker: the run stays queued, so only keepalives flow (keepalive_seconds=1 in tests).
    run_id = (await (await api.post("/v1/runs", json={"input": "wait"})).json())["run_id"]
    response = await api.get(f"/v1/runs/{run_id}/events")
    frames = []
    async for frame in iter_sse(response):
        frames.append(frame)
        if len(frames) == 2:
            break
    response.close()
    assert [f.comment for f in frames] == ["keepalive", "keepalive"]


async def test_redis_outage_answers_503_with_a_code(settings: Settings) -> None:
    dead = settings.replace(redis_url="redis://127.0.0.1:1/0")  # nothing listens on port 1
    client = TestClient(TestServer(create_app(dead)))
    await client.start_server()
    try:
        headers = {"Authorization": f"Bearer {settings.api.api_key}"}
        response = await client.post("/v1/runs", json={"input": "hi"}, headers=headers)
        assert response.status == 503
        assert response.headers["Retry-After"] == "1"
        assert (await response.json())["error"]["code"] == "redis_unavailable"
        health = await client.get("/health")
        assert health.status == 200
    finally:
        await client.close()


async def test_stream_of_a_vanished_run_ends_instead_of_waiting_forever(
    api: TestClient, redis: Any, settings: Settings, monkeypatch: Any
) -> None:
    from hermes_queue.api import feed
    from hermes_queue.keys import Keys

    monkeypatch.setattr(feed, "RECORD_CHECK_EVERY", 1)
    run_id = (await (await api.post("/v1/runs", json={"input": "lost"})).json())["run_id"]
    response = await api.get(f"/v1/runs/{run_id}/events")
    frames = iter_sse(response)
    assert (await anext(frames)).comment == "keepalive"  # no worker: the run just waits
    await redis.delete(Keys(settings.redis.namespace).run(run_id))  # Redis lost the run
    comments = [frame.comment async for frame in frames]
    assert comments[-1] == "run not found"
