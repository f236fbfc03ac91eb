"""The run state machine and its fencing, against a real Redis."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_queue.config import Settings
from hermes_queue.events import RunEvent
from hermes_queue.keys import Keys
from hermes_queue.runs.attempt import Attempt
from hermes_queue.runs.model import FailReason, NewRun, RunStatus
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.streams.codec import decode_entry


@pytest.fixture
def repo(redis: Any, settings: Settings) -> RunRepository:
    return RunRepository(redis, settings.redis.keys, settings.runs)


async def create(repo: RunRepository) -> str:
    run_id = new_run_id()
    assert await repo.create(NewRun(run_id, "s1", TurnRequest("hi")))
    return run_id


async def claimed(repo: RunRepository, run_id: str, worker_id: str = "w1") -> Attempt:
    attempt = await repo.claim(run_id, worker_id)
    assert attempt is not None
    return attempt


async def expire_lease(redis: Any, keys: Keys, run_id: str) -> None:
    """Make the lease look lapsed, as if its worker stopped beating long ago."""
    await redis.zadd(keys.leases, {run_id: 0})


async def events(redis: Any, keys: Keys, run_id: str) -> list[RunEvent]:
    return [decode_entry(run_id, i, f) for i, f in await redis.xrange(keys.events(run_id))]


async def test_create_stores_the_record_and_queues_the_run_id_alone(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    record = await repo.get(run_id)
    assert record is not None and record.status == RunStatus.QUEUED
    assert await redis.zscore(keys.queue, run_id) is not None
    # The queue entry is the run id; nothing else is written per job (no arq job key).
    assert not await redis.exists(f"arq:job:{run_id}", f"arq:in-progress:{run_id}")
    assert not await repo.create(NewRun(run_id, "s1", TurnRequest()))


async def test_claim_is_exclusive_and_terminal_runs_are_no_ops(repo: RunRepository) -> None:
    run_id = await create(repo)
    attempt = await claimed(repo, run_id)
    assert attempt.number == 1 and attempt.run_id == run_id
    assert attempt.record.status == RunStatus.RUNNING and attempt.record.worker == "w1"
    assert await repo.claim(run_id, "w2") is None
    assert await attempt.complete(output="x", usage={}, messages=[], runtime=None)
    assert await repo.claim(run_id, "w3") is None


async def test_reaper_requeues_and_the_old_attempt_is_fenced(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    first = await claimed(repo, run_id)
    assert await first.append([("message.delta", {"delta": "a"})])
    await expire_lease(redis, keys, run_id)
    assert await repo.leases.reap(run_id) == "requeued"
    # The frozen first attempt wakes up: every write is refused.
    assert await first.append([("message.delta", {"delta": "late"})]) is None
    second = await claimed(repo, run_id, "w2")
    assert second.number == 2
    assert await first.append([("message.delta", {"delta": "late"})]) is None
    assert not await first.complete(output="late", usage={}, messages=[], runtime=None)
    assert not await first.fail(FailReason.INTERNAL, "late")
    assert await second.complete(output="ok", usage={}, messages=[], runtime=None)
    deltas = [
        e.data["delta"] for e in await events(redis, keys, run_id) if e.type == "message.delta"
    ]
    assert deltas == ["a"]


async def test_reaper_fails_run_out_of_attempts_with_worker_lost(
    repo: RunRepository, redis: Any, keys: Keys, settings: Settings
) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.replace(max_attempts=1).runs)
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    await expire_lease(redis, keys, run_id)
    assert await repo.leases.reap(run_id) == "failed"
    record = await repo.get(run_id)
    assert record is not None and record.status == "failed" and record.reason == "worker_lost"
    last = (await events(redis, keys, run_id))[-1]
    assert last.type == "run.failed" and last.data["reason"] == "worker_lost"
    assert await redis.ttl(keys.run(run_id)) <= settings.runs.retention_seconds
    # Listed with the failures the stats count (the dashboard's and status's list).
    assert [m.decode() for m in await redis.zrange(keys.failures_at(0), 0, -1)] == [run_id]


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
    assert await redis.zcard(keys.failures_at(0)) == 0  # a cancelled run is no failure


async def test_stop_queued_run_removes_its_job(repo: RunRepository, redis: Any, keys: Keys) -> None:
    run_id = await create(repo)
    outcome = await repo.request_stop(run_id)
    assert outcome.found and outcome.status == "cancelled"
    assert await redis.zscore(keys.queue, run_id) is None
    assert await repo.claim(run_id, "w1") is None
    assert (await repo.request_stop(run_id)).status == "cancelled"
    assert not (await repo.request_stop("run_missing")).found


async def test_events_carry_seq_attempt_and_session(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    attempt = await claimed(repo, run_id)
    await attempt.append([("message.delta", {"delta": "a"}), ("message.delta", {"delta": "b"})])
    got = await events(redis, keys, run_id)
    assert [e.seq for e in got] == [1, 2]
    assert {e.attempt for e in got} == {1} and {e.session_id for e in got} == {"s1"}
    # A later batch continues the numbering; the record shows the batch's last event.
    await attempt.append([("reasoning.available", {"text": "c"}), ("tool.started", {"tool": "t"})])
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
    await (await claimed(repo, run_id)).hand_back()
    record = await repo.get(run_id)
    assert record is not None and record.status == "queued"
    again = await claimed(repo, run_id, "w2")
    assert again.number == 2


async def test_claim_takes_the_job_out_of_the_queue(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    await repo.claim(run_id, "w1")
    assert await redis.zscore(keys.queue, run_id) is None


async def test_requeued_run_stays_queued_when_the_stale_attempt_ends(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    stale = await claimed(repo, run_id)
    await expire_lease(redis, keys, run_id)
    assert await repo.leases.reap(run_id) == "requeued"
    # The frozen attempt wakes up and ends: fenced off, and the run keeps its queue entry.
    assert not await stale.complete(output="late", usage={}, messages=[], runtime=None)
    assert await redis.zscore(keys.queue, run_id) is not None
    assert (await claimed(repo, run_id, "w2")).number == 2


async def test_racing_claims_take_a_queue_entry_once_and_stale_entries_are_dropped(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    first, second = await repo.claim(run_id, "w1"), await repo.claim(run_id, "w2")
    assert first is not None and second is None
    # An entry whose run is finished (or expired) is dropped by the worker that finds it.
    done = await create(repo)
    await redis.zadd(keys.queue, {"run_expired": 0})
    assert await repo.request_stop(done)
    await redis.zadd(keys.queue, {done: 0})
    assert await repo.claim(done, "w1") is None
    assert await repo.claim("run_expired", "w1") is None
    assert await redis.zcard(keys.queue) == 0


async def test_retried_append_with_the_same_token_does_not_duplicate(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    attempt = await claimed(repo, run_id)
    batch = [("message.delta", {"delta": "a"}), ("message.delta", {"delta": "b"})]
    first = await attempt.append(batch, batch_token="tok-1")
    again = await attempt.append(batch, batch_token="tok-1")
    assert first == again and first is not None and len(first) == 2
    assert [e.data["delta"] for e in await events(redis, keys, run_id)] == ["a", "b"]


async def test_released_run_is_queued_and_workers_are_woken(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    attempt = await claimed(repo, run_id)
    pubsub = redis.pubsub()
    await pubsub.subscribe(keys.wake_channel)
    await pubsub.get_message(timeout=1)  # the subscribe confirmation
    await attempt.hand_back()
    assert await redis.zscore(keys.queue, run_id) is not None
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


async def test_each_ending_writes_its_event_and_record_fields(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    done, failed, cancelled = await create(repo), await create(repo), await create(repo)
    usage = {"input_tokens": 3, "output_tokens": 2}
    messages = [{"role": "assistant", "content": "hi"}]
    ok = await (await claimed(repo, done)).complete(
        output="hi", usage=usage, messages=messages, runtime={"model": "m"}
    )
    assert ok
    assert await (await claimed(repo, failed)).fail(FailReason.PROVIDER_AUTH, "bad key")
    assert await (await claimed(repo, cancelled)).cancel()

    record = await repo.get(done)
    assert record is not None and (record.status, record.output) == ("completed", "hi")
    assert record.usage == usage
    last = (await events(redis, keys, done))[-1]
    assert last.type == "run.completed"
    assert last.data == {
        "output": "hi",
        "usage": usage,
        "messages": messages,
        "runtime": {"model": "m"},
    }

    record = await repo.get(failed)
    assert record is not None and record.status == "failed"
    assert (record.error, record.reason) == ("bad key", "provider_auth")
    last = (await events(redis, keys, failed))[-1]
    assert last.type == "run.failed"
    assert last.data == {"error": "bad key", "reason": "provider_auth"}

    record = await repo.get(cancelled)
    assert record is not None and record.status == "cancelled"
    assert (await events(redis, keys, cancelled))[-1].type == "run.cancelled"
    # Every ending also drops the lease.
    assert await redis.zcard(keys.leases) == 0


async def test_hand_back_of_a_run_being_stopped_cancels_it(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    attempt = await claimed(repo, run_id)
    assert (await repo.request_stop(run_id)).status == "stopping"
    await attempt.hand_back()
    record = await repo.get(run_id)
    assert record is not None and record.status == "cancelled"
    assert await redis.zscore(keys.queue, run_id) is None


async def test_a_terminal_write_redis_refuses_is_logged_not_raised(
    repo: RunRepository, redis: Any, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    """The reaper settles the run once its lease lapses; the worker must go on."""
    run_id = await create(repo)
    attempt = await claimed(repo, run_id)
    await redis.set(keys.events(run_id), "not a stream")  # XADD now fails inside the script
    assert not await attempt.fail(FailReason.INTERNAL, "boom")
    assert "could not write its terminal event" in caplog.text
    record = await repo.get(run_id)
    assert record is not None and record.status == "running"


async def test_a_live_runs_record_and_events_outlast_retention_and_expire_after_it_ends(
    repo: RunRepository, redis: Any, keys: Keys, settings: Settings
) -> None:
    """The first append gives the stream its TTL; later appends leave it, the lease heartbeat
    renews it and the record's (so a run longer than the retention never loses its record or
    events mid-run) and the terminal transition restarts both."""
    run_id = await create(repo)
    attempt = await claimed(repo, run_id)
    stream = keys.events(run_id)
    assert await attempt.append([("run.started", {})])
    assert 0 < await redis.ttl(stream) <= settings.runs.retention_seconds
    await redis.expire(stream, 5)  # the retention nearly over, the run still going
    await redis.expire(keys.run(run_id), 5)
    assert await attempt.append([("message.delta", {"delta": "a"})])
    assert await redis.ttl(stream) <= 5
    renew = redis.register_script(repo.leases.renew_script)
    renew_keys, renew_args = repo.leases.renew_args(run_id, attempt.number)
    assert await renew(keys=renew_keys, args=renew_args) == 0
    assert await redis.ttl(stream) > settings.runs.retention_seconds - 5
    assert await redis.ttl(keys.run(run_id)) > settings.runs.retention_seconds - 5
    await redis.expire(stream, 5)
    assert await attempt.complete(output="a", usage={}, messages=[], runtime=None)
    assert await redis.ttl(stream) > settings.runs.retention_seconds - 5
    assert [e.type for e in await events(redis, keys, run_id)][-2:] == [
        "assistant.completed",
        "run.completed",
    ]


async def test_the_text_readers_were_shown_leaves_out_what_a_later_attempt_superseded(
    repo: RunRepository,
) -> None:
    """A third attempt goes on from the reply as it stands: the second attempt's resume took
    back what the first had streamed after its last recorded step."""
    run_id = await create(repo)
    first = await claimed(repo, run_id)
    await first.append([("message.delta", {"delta": "kept "})])
    written = await first.append_step(
        [("message.delta", {"delta": "also kept "})], {"kind": "model"}, "batch-1"
    )
    assert written is not None
    (step_event,) = written.event_ids
    await first.append([("message.delta", {"delta": "lost with the worker"})])
    await first.hand_back()
    second = await claimed(repo, run_id)
    valid = {"attempt": second.number, "valid_through": step_event, "steps": 1}
    await second.append([("run.resumed", valid), ("message.delta", {"delta": "said again"})])
    assert await repo.text_after(run_id, None) == "kept also kept said again"
    assert await repo.text_after(run_id, None, through=step_event) == "kept also kept "
    assert await repo.text_after(run_id, step_event) == "said again"
