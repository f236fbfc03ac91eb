"""A run's pickup and its claim are one script: a worker that dies at any point after taking a
run leaves a lease behind, which the reaper settles, and no pickup marker can hold a run back."""

from __future__ import annotations

import asyncio
from typing import Any

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.model import NewRun, RunStatus
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.reaper import reap_forever
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from tests.support.inprocess import running_worker
from tests.support.polling import eventually


async def create(repo: RunRepository) -> str:
    run_id = new_run_id()
    assert await repo.create(NewRun(run_id, "s1", TurnRequest("hello")))
    return run_id


async def wait_for_status(repo: RunRepository, run_id: str, status: str) -> None:
    reached = lambda record: record is not None and record.status == status  # noqa: E731
    await eventually(lambda: repo.get(run_id), reached, within=10, what=f"{run_id} at {status}")


async def test_a_run_taken_by_a_worker_that_died_is_run_by_another(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    """The dead worker's pickup was its claim: the queue entry is gone and the lease lapses; a
    reaper requeues the run and a live worker completes it as attempt 2."""
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = await create(repo)
    assert await repo.claim(run_id, "dead-worker") is not None
    assert await redis.zscore(keys.queue, run_id) is None
    await redis.zadd(keys.leases, {run_id: 0})  # its heartbeat stopped long ago
    reaper = asyncio.create_task(reap_forever(repo, 0.05))
    try:
        async with running_worker(settings):
            await wait_for_status(repo, run_id, RunStatus.COMPLETED)
    finally:
        reaper.cancel()
        await asyncio.gather(reaper, return_exceptions=True)
    record = await repo.get(run_id)
    assert record is not None and record.attempt == 2


async def test_an_older_workers_pickup_marker_does_not_hold_a_run_back(
    redis: Any, settings: Settings
) -> None:
    """arq's in-progress key, as a worker of an earlier version left it, is ignored."""
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = await create(repo)
    await redis.psetex(f"arq:in-progress:{run_id}", 600_000, b"1")
    try:
        async with running_worker(settings):
            await wait_for_status(repo, run_id, RunStatus.COMPLETED)
    finally:
        await redis.delete(f"arq:in-progress:{run_id}")
