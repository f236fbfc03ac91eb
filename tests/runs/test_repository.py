"""The run state machine and its fencing, against a real Redis."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from hermes_queue.config import Settings
from hermes_queue.events import EventType, RunEvent
from hermes_queue.jobqueue.jobs import job_key
from hermes_queue.keys import Keys
from hermes_queue.runs.model import RunStatus
from hermes_queue.runs.repository import RunRepository, new_run_id


@pytest.fixture
def repo(redis: Any, settings: Settings) -> RunRepository:
    return RunRepository(redis, settings)


async def create(repo: RunRepository, **kw: Any) -> str:
    run_id = new_run_id()
    assert await repo.create(run_id=run_id, session_id="s1", request={"message": "hi"}, **kw)
    return run_id


async def expire_lease(redis: Any, keys: Keys, run_id: str) -> None:
    """Make the lease look lapsed, as if its worker stopped beating long ago."""
    await redis.zadd(keys.leases, {run_id: 0})


async def events(redis: Any, keys: Keys, run_id: str) -> list[RunEvent]:
    return [RunEvent.from_entry(run_id, i, f) for i, f in await redis.xrange(keys.events(run_id))]


async def test_create_stores_record_and_a_msgpack_job(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    record = await repo.get(run_id)
    assert record is not None and record.status == RunStatus.QUEUED
    assert await redis.zscore(keys.queue, run_id) is not None
    job = msgpack.unpackb(await redis.get(job_key(run_id)), raw=False)
    assert job["f"] == "run_turn" and job["k"] == {"run_id": run_id}
    assert not await repo.create(run_id=run_id, session_id="s1", request={})


async def test_claim_is_exclusive_and_terminal_runs_are_no_ops(repo: RunRepository) -> None:
    run_id = await create(repo)
    claim = await repo.claim(run_id, "w1")
    assert claim is not None and claim.attempt == 1
    assert await repo.claim(run_id, "w2") is None
    await repo.finish(run_id, 1, RunStatus.COMPLETED, EventType.RUN_COMPLETED, {"output": "x"})
    assert await repo.claim(run_id, "w3") is None


async def test_reaper_requeues_and_the_old_attempt_is_fenced(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    assert await repo.append(run_id, 1, [("message.delta", {"delta": "a"})])
    await expire_lease(redis, keys, run_id)
    assert await repo.leases.reap(run_id) == "requeued"
    # The frozen first attempt wakes up: every write is refused.
    assert await repo.append(run_id, 1, [("message.delta", {"delta": "late"})]) is None
    second = await repo.claim(run_id, "w2")
    assert second is not None and second.attempt == 2
    assert await repo.append(run_id, 1, [("message.delta", {"delta": "late"})]) is None
    assert await repo.finish(run_id, 1, RunStatus.COMPLETED, EventType.RUN_COMPLETED, {}) is None
    assert (
        await repo.finish(run_id, 2, RunStatus.COMPLETED, EventType.RUN_COMPLETED, {}) is not None
    )
    deltas = [
        e.data["delta"] for e in await events(redis, keys, run_id) if e.type == "message.delta"
    ]
    assert deltas == ["a"]


async def test_reaper_fails_run_out_of_attempts_with_worker_lost(
    repo: RunRepository, redis: Any, keys: Keys, settings: Settings
) -> None:
    repo = RunRepository(redis, settings.replace(max_attempts=1))
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    await expire_lease(redis, keys, run_id)
    assert await repo.leases.reap(run_id) == "failed"
    record = await repo.get(run_id)
    assert record is not None and record.status == "failed" and record.reason == "worker_lost"
    last = (await events(redis, keys, run_id))[-1]
    assert last.type == "run.failed" and last.data["reason"] == "worker_lost"
    assert await redis.ttl(keys.run(run_id)) <= settings.retention_seconds


async def test_live_lease_is_left_alone(repo: RunRepository) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    assert await repo.leases.reap(run_id) == "alive"
    assert await repo.leases.reap_expired() == {}


async def test_stopping_run_whose_worker_died_ends_cancelled(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    assert (await repo.request_stop(run_id)).status == "stopping"
    await expire_lease(redis, keys, run_id)
    assert await repo.leases.reap(run_id) == "cancelled"
    assert (await events(redis, keys, run_id))[-1].type == "run.cancelled"


async def test_stop_queued_run_removes_its_job(repo: RunRepository, redis: Any, keys: Keys) -> None:
    run_id = await create(repo)
    outcome = await repo.request_stop(run_id)
    assert outcome.found and outcome.status == "cancelled"
    assert await redis.zscore(keys.queue, run_id) is None
    assert not await redis.exists(job_key(run_id))
    assert await repo.claim(run_id, "w1") is None
    assert (await repo.request_stop(run_id)).status == "cancelled"
    assert not (await repo.request_stop("run_missing")).found


async def test_events_carry_seq_attempt_and_session(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    await repo.append(
        run_id, 1, [("message.delta", {"delta": "a"}), ("message.delta", {"delta": "b"})]
    )
    got = await events(redis, keys, run_id)
    assert [e.seq for e in got] == [1, 2]
    assert {e.attempt for e in got} == {1} and {e.session_id for e in got} == {"s1"}
    # A later batch continues the numbering; the record shows the batch's last event.
    await repo.append(
        run_id, 1, [("reasoning.available", {"text": "c"}), ("tool.started", {"tool": "t"})]
    )
    got = await events(redis, keys, run_id)
    assert [e.seq for e in got] == [1, 2, 3, 4]
    assert [e.type for e in got][2:] == ["reasoning.available", "tool.started"]
    record = await repo.get(run_id)
    assert record is not None and record.last_event == "tool.started"
    assert await redis.ttl(keys.events(run_id)) > 0


async def test_released_run_goes_back_to_the_queue_for_another_attempt(
    repo: RunRepository,
) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    assert await repo.release(run_id, 1) == "released"
    record = await repo.get(run_id)
    assert record is not None and record.status == "queued"
    again = await repo.claim(run_id, "w2")
    assert again is not None and again.attempt == 2


async def test_claim_takes_the_job_out_of_the_queue(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    assert await redis.zscore(keys.queue, run_id) is None


async def test_requeued_run_gets_its_job_back_after_a_stale_delivery_ends(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    await expire_lease(redis, keys, run_id)
    assert await repo.leases.reap(run_id) == "requeued"
    # The frozen attempt's arq delivery ends: arq deletes the job and its queue entry.
    await redis.delete(job_key(run_id))
    await redis.zrem(keys.queue, run_id)
    assert await repo.ensure_job(run_id)
    assert await redis.exists(job_key(run_id))
    assert await redis.zscore(keys.queue, run_id) is not None
    # Nothing to do for a run that is running or finished.
    claim = await repo.claim(run_id, "w2")
    assert claim is not None
    assert not await repo.ensure_job(run_id)


async def test_retried_append_with_the_same_token_does_not_duplicate(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    batch = [("message.delta", {"delta": "a"}), ("message.delta", {"delta": "b"})]
    first = await repo.append(run_id, 1, batch, batch_token="tok-1")
    again = await repo.append(run_id, 1, batch, batch_token="tok-1")
    assert first == again and first is not None and len(first) == 2
    assert [e.data["delta"] for e in await events(redis, keys, run_id)] == ["a", "b"]


async def test_released_run_is_queued_with_a_job_and_workers_are_woken(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    pubsub = redis.pubsub()
    await pubsub.subscribe(keys.wake_channel)
    await pubsub.get_message(timeout=1)  # the subscribe confirmation
    assert await repo.release(run_id, 1) == "released"
    assert await redis.zscore(keys.queue, run_id) is not None
    assert await redis.exists(job_key(run_id))
    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
    assert message is not None and message["data"].decode() == run_id
    await pubsub.aclose()


async def test_expired_leases_use_the_redis_clock(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    assert await repo.leases.expired() == []
    await expire_lease(redis, keys, run_id)
    assert await repo.leases.expired() == [run_id]
