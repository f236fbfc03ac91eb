"""A run's steers through its scripts (runs/steers.py, lua/steer*.lua), against a real Redis:
accepted only while running; handed to the worker with every recorded step; taken off in the
step that applied them, once, whatever attempt recorded it; what a completed run never applied
is its ``pending_steer``, taken once by a later turn."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.model import FailReason
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.steers import PendingSteer
from tests.runs.test_repository import claimed, create, events, expire_lease


@pytest.fixture
def repo(redis: Any, settings: Settings) -> RunRepository:
    return RunRepository(redis, settings.redis.keys, settings.runs)


# Quotes, a backslash, a slash, newlines and non-ASCII: what the scripts' JSON must carry intact.
AWKWARD = 'say "hi" \\ / — ünïcode\nsecond line'


async def test_only_a_running_run_takes_a_steer(repo: RunRepository) -> None:
    assert (await repo.steers.steer("run_missing", "x")).verdict == "missing"
    run_id = await create(repo)
    queued = await repo.steers.steer(run_id, "x")
    assert (queued.verdict, queued.status) == ("not_accepting", "queued")
    attempt = await claimed(repo, run_id)
    accepted = await repo.steers.steer(run_id, AWKWARD)
    assert (accepted.verdict, accepted.steer_id) == ("accepted", "st1")
    await attempt.complete(output="done", usage={}, messages=[], runtime=None)
    assert (await repo.steers.steer(run_id, "x")).status == "completed"


async def test_a_steer_is_pending_until_a_step_applies_it_once(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    first = await claimed(repo, run_id)
    one = await repo.steers.steer(run_id, AWKWARD)
    two = await repo.steers.steer(run_id, "two")
    stored = [e for e in await events(redis, keys, run_id) if e.type == "run.steered"]
    assert [(e.id, e.data) for e in stored] == [
        (one.event_id, {"accepted": True, "steer_id": "st1", "text": AWKWARD}),
        (two.event_id, {"accepted": True, "steer_id": "st2", "text": "two"}),
    ]
    # Every recorded step hands the worker what is still pending.
    written = await first.append_step([], {"kind": "model", "index": 0}, "b1")
    assert written is not None
    assert written.pending_steers == (PendingSteer("st1", AWKWARD), PendingSteer("st2", "two"))
    applied = await first.append_step([], {"kind": "tool", "steers": ["st1"]}, "b2", ("st1",))
    assert applied is not None and applied.pending_steers == (PendingSteer("st2", "two"),)
    # A retried call (its reply lost) takes nothing off twice and records nothing twice.
    again = await first.append_step([], {"kind": "tool", "steers": ["st1"]}, "b2", ("st1",))
    assert again == applied and len(await repo.steps(run_id)) == 2
    # The next attempt is claimed with the steers still pending.
    await expire_lease(redis, keys, run_id)
    assert await repo.leases.reap(run_id) == "requeued"
    second = await claimed(repo, run_id)
    assert second.record.pending_steers == (PendingSteer("st2", "two"),)
    # A fenced-off attempt applies nothing.
    assert await first.append_step([], {"kind": "tool"}, "b3", ("st2",)) is None
    record = await repo.get(run_id)
    assert record is not None and record.pending_steers == (PendingSteer("st2", "two"),)


async def test_a_completed_runs_unapplied_steers_are_its_pending_steer(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    attempt = await claimed(repo, run_id)
    await repo.steers.steer(run_id, AWKWARD)
    await repo.steers.steer(run_id, "later")
    await attempt.complete(output="done", usage={"total_tokens": 1}, messages=[], runtime=None)
    record = await repo.get(run_id)
    assert record is not None and record.pending_steer == f"{AWKWARD}\nlater"
    assert record.to_status()["pending_steer"] == f"{AWKWARD}\nlater"
    terminal = (await events(redis, keys, run_id))[-1]
    assert terminal.type == "run.completed"
    assert terminal.data == {
        "output": "done",
        "usage": {"total_tokens": 1},
        "messages": [],
        "runtime": None,
        "pending_steer": f"{AWKWARD}\nlater",
    }
    assert await repo.steers.take(run_id) == f"{AWKWARD}\nlater"
    assert await repo.steers.take(run_id) is None  # once


async def test_a_run_without_leftover_steers_reports_none(
    repo: RunRepository, redis: Any, keys: Keys
) -> None:
    run_id = await create(repo)
    attempt = await claimed(repo, run_id)
    await attempt.complete(output="done", usage={}, messages=[], runtime=None)
    record = await repo.get(run_id)
    assert record is not None and record.pending_steer is None
    assert "pending_steer" not in record.to_status()
    assert "pending_steer" not in (await events(redis, keys, run_id))[-1].data
    assert await repo.steers.take(run_id) is None
    # A failed run never reports one (as upstream), whatever was pending.
    other = await create(repo)
    failing = await claimed(repo, other)
    await repo.steers.steer(other, "never applied")
    await failing.fail(FailReason.AGENT_ERROR, "boom")
    failed = await repo.get(other)
    assert failed is not None and failed.pending_steer is None
    assert "pending_steer" not in failed.to_status()
