"""Approvals across OS processes: the run starts on one API replica, a worker process holds it,
and the answer arrives through another replica (upstream-api.md §7: upstream can only resolve an
approval in the process running the agent)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from hermes_queue.client import iter_sse
from tests.support.polling import eventually
from tests.support.processes import Cluster


async def _status(session: aiohttp.ClientSession, url: str, run_id: str, *wanted: str) -> Any:
    async def status() -> Any:
        async with session.get(f"{url}/v1/runs/{run_id}") as response:
            return await response.json()

    return await eventually(status, lambda b: b["status"] in wanted, within=20, what=run_id)


async def test_answer_through_a_second_replica_resumes_the_worker(cluster: Cluster) -> None:
    first = await cluster.start_api()
    second = await cluster.start_api()
    # A long heartbeat: the worker's own poll would come too late, so the answer must travel
    # from the second API process to the worker process over pub/sub.
    await cluster.start_worker(heartbeat_seconds=20.0, lease_seconds=60.0)
    headers = {"Authorization": f"Bearer {cluster.settings.api.api_key}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(f"{first}/v1/runs", json={"input": "rm it [approve]"}) as created:
            run_id = (await created.json())["run_id"]
        await _status(session, first, run_id, "waiting_for_approval")
        async with session.post(
            f"{second}/v1/runs/{run_id}/approval", json={"choice": "always"}
        ) as answered:
            assert answered.status == 200
            assert (await answered.json())["resolved"] == 1
        done = await asyncio.wait_for(_status(session, first, run_id, "completed"), 10)
        async with session.get(f"{second}/v1/runs/{run_id}/events") as response:
            names = [f.json()["event"] async for f in iter_sse(response) if f.data]
    assert done["output"] == "Echo: rm it (command approved: always)"
    assert names.index("approval.request") < names.index("approval.responded")
    assert names[-1] == "run.completed"
