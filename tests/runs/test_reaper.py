"""Jobs whose worker died between arq's pickup and the claim are freed for another worker."""

from __future__ import annotations

import asyncio
from typing import Any

from hermes_queue.config import Settings
from hermes_queue.jobqueue.jobs import in_progress_key, in_progress_ttl_ms
from hermes_queue.keys import Keys
from hermes_queue.runs.model import RunStatus
from hermes_queue.runs.repository import RunRepository, new_run_id
from tests.api.conftest import running_worker


async def picked_up_long_ago(redis: Any, keys: Keys, settings: Settings, run_id: str) -> None:
    """What a worker SIGKILLed right after arq's pickup leaves: the job still queued (enqueued
    two leases ago) under an in-progress key set two leases ago."""
    lease_ms = int(settings.lease_seconds * 1000)
    now_ms = int((await redis.time())[0] * 1000)
    await redis.zadd(keys.queue, {run_id: now_ms - 2 * lease_ms})
    full_ms = in_progress_ttl_ms(settings.job_timeout_seconds)
    await redis.psetex(in_progress_key(run_id), full_ms - 2 * lease_ms, b"1")


async def create(repo: RunRepository) -> str:
    run_id = new_run_id()
    assert await repo.create(run_id=run_id, session_id="s1", request={"message": "hello"})
    return run_id


async def test_only_old_unclaimed_pickups_are_released(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    repo = RunRepository(redis, settings)
    orphan, fresh, waiting = await create(repo), await create(repo), await create(repo)
    await picked_up_long_ago(redis, keys, settings, orphan)
    # Picked up just now (its claim is milliseconds away), though enqueued long ago.
    await picked_up_long_ago(redis, keys, settings, fresh)
    full_ms = in_progress_ttl_ms(settings.job_timeout_seconds)
    await redis.psetex(in_progress_key(fresh), full_ms, b"1")
    # Waiting in a backlog: old, but never picked up.
    lease_ms = int(settings.lease_seconds * 1000)
    await redis.zadd(keys.queue, {waiting: int((await redis.time())[0] * 1000) - 2 * lease_ms})
    try:
        assert await repo.leases.release_orphaned_pickups() == [orphan]
        assert not await redis.exists(in_progress_key(orphan))
        assert await redis.exists(in_progress_key(fresh))
        assert await repo.leases.release_orphaned_pickups() == []
    finally:
        await redis.delete(*(in_progress_key(r) for r in (orphan, fresh, waiting)))


async def test_a_run_whose_worker_died_before_claiming_it_runs_on_another(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    repo = RunRepository(redis, settings)
    run_id = await create(repo)
    await picked_up_long_ago(redis, keys, settings, run_id)
    try:
        async with running_worker(settings):
            for _ in range(200):  # arq alone would skip the job for job_timeout + 70 s
                record = await repo.get(run_id)
                if record is not None and record.status == RunStatus.COMPLETED:
                    break
                await asyncio.sleep(0.05)
        assert record is not None and record.status == RunStatus.COMPLETED
    finally:
        await redis.delete(in_progress_key(run_id))
