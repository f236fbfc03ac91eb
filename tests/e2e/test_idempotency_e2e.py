"""Idempotency across replicas: a retry that reaches a second API process replays the run the
first one started (the record is in Redis, not in a process)."""

from __future__ import annotations

from typing import Any

import aiohttp

from hermes_queue.config import Settings
from tests.support.polling import eventually
from tests.support.processes import Cluster


def _run_records(cluster: Cluster) -> int:
    """Run records (``<ns>:run:{<id>}``), not a run's other keys: its events, steps and the
    readers set a read run has until its reader's API process lets go of it (asynchronously,
    after the response ended: counting it made this flaky)."""
    found = cluster.redis().scan_iter(match=f"{cluster.settings.redis.namespace}:run:*", count=500)
    return sum(1 for key in found if key.endswith(b"}"))


async def test_retry_on_a_second_api_replays_the_same_run(
    cluster: Cluster, settings: Settings
) -> None:
    first_url, second_url = await cluster.start_api(), await cluster.start_api()
    headers = {"Authorization": f"Bearer {settings.api.api_key}", "Idempotency-Key": "e2e-runs-1"}
    body = {"input": "hello across replicas"}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(f"{first_url}/v1/runs", json=body) as response:
            assert response.status == 202
            first: dict[str, Any] = await response.json()
        await cluster.start_worker()
        async with http.post(f"{second_url}/v1/runs", json=body) as response:
            assert response.status == 202
            assert response.headers["Idempotency-Replayed"] == "true"
            again = await response.json()
        assert again["run_id"] == first["run_id"] and again["replayed"] is True
        async with http.post(f"{second_url}/v1/runs", json={"input": "other"}) as response:
            assert response.status == 409
            assert (await response.json())["error"]["code"] == "idempotency_key_conflict"

        # The run completes once; a later replay reports its current status.
        async def status() -> str:
            async with http.get(f"{second_url}/v1/runs/{first['run_id']}") as response:
                return str((await response.json())["status"])

        await eventually(status, "completed".__eq__, within=10, what="the run completed")
        async with http.post(f"{first_url}/v1/runs", json=body) as response:
            assert (await response.json())["status"] == "completed"
    assert _run_records(cluster) == 1


async def test_chat_completion_retry_on_a_second_api(cluster: Cluster, settings: Settings) -> None:
    first_url, second_url = await cluster.start_api(), await cluster.start_api()
    await cluster.start_worker()
    headers = {"Authorization": f"Bearer {settings.api.api_key}", "Idempotency-Key": "e2e-chat-1"}
    body = {"messages": [{"role": "user", "content": "once only"}]}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(f"{first_url}/v1/chat/completions", json=body) as response:
            assert response.status == 200
            first = await response.json()
            run_id = response.headers["X-Hermes-Run-Id"]
        async with http.post(f"{second_url}/v1/chat/completions", json=body) as response:
            assert response.status == 200
            assert response.headers["X-Hermes-Run-Id"] == run_id
            assert response.headers["Idempotency-Replayed"] == "true"
            assert await response.json() == first
    assert first["choices"][0]["message"]["content"] == "Echo: once only"
    assert _run_records(cluster) == 1
