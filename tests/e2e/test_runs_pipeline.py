"""End to end, with separate OS processes: API replicas, workers and a client over HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from hermes_queue.client import HermesQueueClient, iter_sse
from tests.support.processes import Cluster

TERMINAL = {"run.completed", "run.failed", "run.cancelled"}


async def collect(
    client: HermesQueueClient, run_id: str, after: str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    return [item async for item in client.iter_events(run_id, after=after)]


async def read_until(
    url: str, key: str, run_id: str, count: int, after: str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """Read ``count`` events on a raw SSE connection, then drop it (a client going away)."""
    headers = {"Authorization": f"Bearer {key}"}
    if after:
        headers["Last-Event-ID"] = after
    got: list[tuple[str, dict[str, Any]]] = []
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/v1/runs/{run_id}/events", headers=headers) as response,
    ):
        assert response.status == 200
        async for frame in iter_sse(response):
            if frame.data:
                got.append((frame.id, frame.json()))
            if len(got) == count:
                break
    return got


async def test_run_streams_every_event_in_order(cluster: Cluster, client_for: Any) -> None:
    url = await cluster.start_api()
    await cluster.start_worker()
    async with client_for(url) as client:
        run_id = await client.create_run("hello [think] [tool:search] there world")
        events = await collect(client, run_id)
        status = await client.get_run(run_id)

    names = [payload["event"] for _, payload in events]
    assert names[0] == "reasoning.available"
    assert names.index("tool.started") < names.index("tool.completed")
    assert names[-1] == "run.completed"
    text = "".join(p["delta"] for _, p in events if p["event"] == "message.delta")
    assert text == "Echo: hello there world" == events[-1][1]["output"]
    ids = [event_id for event_id, _ in events]
    assert len(set(ids)) == len(ids) and all(ids)
    assert status["status"] == "completed" and status["output"] == text
    assert status["object"] == "hermes.run" and status["last_event"] == "run.completed"


async def test_resume_mid_run_on_another_replica_gets_exactly_the_rest(
    cluster: Cluster, client_for: Any
) -> None:
    first, second = await cluster.start_api(), await cluster.start_api()
    await cluster.start_worker(echo_token_delay=0.05)
    key = cluster.settings.api.api_key
    async with client_for(first) as client:
        run_id = await client.create_run(" ".join(f"w{i}" for i in range(40)))
        head = await read_until(first, key, run_id, 5)
        assert (await client.get_run(run_id))["status"] == "running"
    # Resume on the other replica, mid-run, from the last id seen on the first.
    async with client_for(second) as other:
        tail = await collect(other, run_id, after=head[-1][0])
    async with client_for(first) as client:
        full = await collect(client, run_id)

    assert [e for e, _ in head + tail] == [e for e, _ in full]
    assert head + tail == full
    assert tail[-1][1]["event"] == "run.completed"


async def test_many_concurrent_readers_see_identical_sequences(
    cluster: Cluster, client_for: Any
) -> None:
    url = await cluster.start_api()
    await cluster.start_worker(echo_token_delay=0.01)
    async with client_for(url) as client:
        run_id = await client.create_run(" ".join(f"t{i}" for i in range(30)))
        results = await asyncio.gather(*(collect(client, run_id) for _ in range(25)))
    assert all(result == results[0] for result in results)
    assert results[0][-1][1]["event"] == "run.completed"


async def test_reader_after_the_run_ended_replays_it_from_any_replica(
    cluster: Cluster, client_for: Any
) -> None:
    first, second = await cluster.start_api(), await cluster.start_api()
    await cluster.start_worker()
    async with client_for(first) as client:
        run_id = await client.create_run("done already")
        live = await collect(client, run_id)
    async with client_for(second) as other:
        replay = await collect(other, run_id)
        after_last = await collect(other, run_id, after=live[-1][0])
        status = await other.get_run(run_id)
    assert replay == live
    assert after_last == []
    assert status["status"] == "completed"


async def test_runs_mode_client_with_session_and_history(cluster: Cluster, client_for: Any) -> None:
    """hermes-webui's runs mode: POST /v1/runs with session_id and history, then its events."""
    url = await cluster.start_api()
    await cluster.start_worker()
    history = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "Echo: first question"},
    ]
    async with client_for(url) as client:
        run_id = await client.create_run(
            "second question", session_id="webui-runs-1", conversation_history=history
        )
        events = [p async for _, p in client.iter_events(run_id)]
        status = await client.get_run(run_id)
    assert events[-1]["event"] == "run.completed"
    assert events[-1]["output"] == "Echo: second question (turn 2)"
    assert status["session_id"] == "webui-runs-1"
