"""Approval requests at the repository and sink level: Redis state, fencing, waiting, timeouts.

The answer is given directly through the repository (what any API replica does), so these tests
need no HTTP; tests/api/test_approvals.py covers the endpoint with real workers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hermes_queue.agents.base import ApprovalRequest, CancelToken, TurnCancelled
from hermes_queue.config import Settings
from hermes_queue.events import RunEvent
from hermes_queue.keys import Keys
from hermes_queue.runs.approvals import approval_message
from hermes_queue.runs.attempt import Attempt
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.streams.codec import decode_entry
from hermes_queue.workers.appends import LeaseLost
from hermes_queue.workers.approval_wait import Wakeup
from hermes_queue.workers.sink import RunEventSink
from tests.support.polling import eventually

REQUEST = ApprovalRequest(command="rm -rf /tmp/x", description="delete", pattern_key="rm")


async def _claimed(repo: RunRepository) -> Attempt:
    run_id = new_run_id()
    await repo.create(NewRun(run_id, "s", TurnRequest("m")))
    attempt = await repo.claim(run_id, "w")
    assert attempt is not None
    return attempt


async def _events(redis: Any, settings: Settings, run_id: str) -> list[RunEvent]:
    entries = await redis.xrange(Keys(settings.redis.namespace).events(run_id))
    return [decode_entry(run_id, entry_id, fields) for entry_id, fields in entries]


async def _wait_status(repo: RunRepository, run_id: str, status: str) -> None:
    reached = lambda record: record is not None and record.status == status  # noqa: E731
    await eventually(lambda: repo.get(run_id), reached, within=4, what=f"run at {status}")


async def test_answer_wakes_the_sink_and_the_run_resumes(redis: Any, settings: Settings) -> None:
    repo = RunRepository(
        redis, settings.redis.keys, settings.replace(heartbeat_seconds=5.0, lease_seconds=20.0).runs
    )
    attempt = await _claimed(repo)
    run_id = attempt.run_id
    wakeup = Wakeup()
    sink = RunEventSink(attempt, cancel=CancelToken(), wakeup=wakeup)
    await sink.delta("before ")
    waiting = asyncio.create_task(sink.approval(REQUEST))
    await _wait_status(repo, run_id, "waiting_for_approval")
    record = await repo.get(run_id)
    assert record is not None and record.last_event == "approval.request"

    outcome = await repo.approvals.answer(run_id, "session")
    assert outcome.verdict == "answered" and len(outcome.request_ids) == 1
    wakeup.notify()  # what the worker's pub/sub listener does; the 5 s poll would be too late
    assert await asyncio.wait_for(waiting, 2) == "session"
    record = await repo.get(run_id)
    assert record is not None and record.status == "running"
    assert record.last_event == "approval.responded"

    events = await _events(redis, settings, run_id)
    assert [e.type for e in events] == [
        "message.started",
        "message.delta",
        "approval.request",
        "approval.responded",
    ]
    asked, answered = events[2].data, events[3].data
    assert asked["command"] == "rm -rf /tmp/x" and asked["pattern_keys"] == ["rm"]
    assert asked["choices"] == ["once", "session", "always", "deny"]
    assert asked["request_id"].startswith("apr_")
    assert answered == {
        "choice": "session",
        "resolved": 1,
        "request_id": asked["request_id"],
        "request_ids": [asked["request_id"]],
    }


async def test_a_lost_pubsub_message_only_delays_the_answer(redis: Any, settings: Settings) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)  # heartbeat 0.5 s in tests
    attempt = await _claimed(repo)
    run_id = attempt.run_id
    sink = RunEventSink(attempt)
    waiting = asyncio.create_task(sink.approval(REQUEST))
    await _wait_status(repo, run_id, "waiting_for_approval")
    await repo.approvals.answer(run_id, "deny")  # nobody rings the sink's wakeup
    assert await asyncio.wait_for(waiting, 3) == "deny"


async def test_the_answer_is_published_on_the_control_channel(
    redis: Any, settings: Settings
) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    attempt = await _claimed(repo)
    run_id = attempt.run_id
    await attempt.request_approval("apr_1", {"request_id": "apr_1"})
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(Keys(settings.redis.namespace).control_channel)
    try:
        await repo.approvals.answer(run_id, "once")
        message = await pubsub.get_message(timeout=2)
        for _ in range(20):
            if message is not None:
                break
            message = await pubsub.get_message(timeout=0.1)
    finally:
        await pubsub.aclose()
    assert message is not None and message["data"].decode() == approval_message(run_id)


async def test_unanswered_request_is_denied_after_the_timeout(
    redis: Any, settings: Settings
) -> None:
    repo = RunRepository(
        redis, settings.redis.keys, settings.replace(approval_timeout_seconds=0.3).runs
    )
    attempt = await _claimed(repo)
    run_id = attempt.run_id
    sink = RunEventSink(attempt)
    assert await asyncio.wait_for(sink.approval(REQUEST), 3) == "deny"
    events = await _events(redis, settings, run_id)
    assert events[-1].type == "approval.responded"
    assert events[-1].data["choice"] == "deny" and events[-1].data["timed_out"] is True
    record = await repo.get(run_id)
    assert record is not None and record.status == "running"
    # The late answer finds nothing pending.
    assert (await repo.approvals.answer(run_id, "once")).verdict == "not_active"


async def test_stop_request_ends_the_wait(redis: Any, settings: Settings) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    attempt = await _claimed(repo)
    run_id = attempt.run_id
    token = CancelToken()
    sink = RunEventSink(attempt, cancel=token)
    waiting = asyncio.create_task(sink.approval(REQUEST))
    await _wait_status(repo, run_id, "waiting_for_approval")
    assert (await repo.request_stop(run_id)).status == "stopping"
    token.cancel("Stop requested via API")  # the worker's listener does this
    with pytest.raises(TurnCancelled):
        await asyncio.wait_for(waiting, 2)
    # Stopping wins over a late answer: no answer is accepted and the status stays.
    assert (await repo.approvals.answer(run_id, "once")).verdict == "not_active"
    record = await repo.get(run_id)
    assert record is not None and record.status == "stopping"


async def test_stopping_run_does_not_ask(redis: Any, settings: Settings) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    attempt = await _claimed(repo)
    run_id = attempt.run_id
    await repo.request_stop(run_id)
    with pytest.raises(TurnCancelled):
        await RunEventSink(attempt).approval(REQUEST)
    record = await repo.get(run_id)
    assert record is not None and record.status == "stopping"


async def test_fifo_all_and_request_id(redis: Any, settings: Settings) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    attempt = await _claimed(repo)
    run_id = attempt.run_id
    for request_id in ("apr_a", "apr_b", "apr_c", "apr_d"):
        assert await attempt.request_approval(request_id, {}) == "waiting"
    assert (await repo.approvals.answer(run_id, "once")).request_ids == ("apr_a",)
    named = await repo.approvals.answer(run_id, "deny", request_id="apr_c")
    assert named.request_ids == ("apr_c",)
    assert (await repo.approvals.answer(run_id, "x", request_id="apr_c")).verdict == "not_pending"
    record = await repo.get(run_id)
    assert record is not None and record.status == "waiting_for_approval"
    rest = await repo.approvals.answer(run_id, "always", resolve_all=True)
    assert rest.request_ids == ("apr_b", "apr_d")
    record = await repo.get(run_id)
    assert record is not None and record.status == "running"
    assert await attempt.approval_choice("apr_c") == "deny"
    assert await attempt.approval_choice("apr_d") == "always"
    last = (await _events(redis, settings, run_id))[-1]
    assert last.data["resolved"] == 2 and last.data["request_ids"] == ["apr_b", "apr_d"]


async def test_retried_request_is_not_asked_twice(redis: Any, settings: Settings) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    attempt = await _claimed(repo)
    run_id = attempt.run_id
    for _ in range(2):
        assert await attempt.request_approval("apr_1", {"n": 1}) == "waiting"
    types = [e.type for e in await _events(redis, settings, run_id)]
    assert types == ["approval.request"]


async def test_stale_attempt_cannot_ask_or_time_out(redis: Any, settings: Settings) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    attempt = await _claimed(repo)
    run_id = attempt.run_id
    await attempt.request_approval("apr_old", {})
    # The attempt's lease lapses; the run is requeued and claimed again.
    await redis.zadd(Keys(settings.redis.namespace).leases, {run_id: 0})
    assert await repo.leases.reap(run_id) == "requeued"
    assert (await repo.approvals.answer(run_id, "once")).verdict == "not_active"
    live = await repo.claim(run_id, "w2")
    assert live is not None and live.number == attempt.number + 1
    assert await attempt.request_approval("apr_stale", {}) is None
    assert await attempt.settle_approval("apr_old") is None
    with pytest.raises(LeaseLost):
        await RunEventSink(attempt).approval(REQUEST)
    # The live attempt's request does not inherit the dead one's.
    await live.request_approval("apr_new", {})
    assert (await repo.approvals.answer(run_id, "once", resolve_all=True)).request_ids == (
        "apr_new",
    )


async def test_answer_codes_for_missing_and_idle_runs(redis: Any, settings: Settings) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    assert (await repo.approvals.answer("run_missing", "once")).verdict == "missing"
    run_id = (await _claimed(repo)).run_id
    assert (await repo.approvals.answer(run_id, "once")).verdict == "not_active"
