"""The scheduler over real Redis and each SQL store, stepped through ticks by a fake clock.

Two ``Scheduler`` objects, each with its own store object and Redis client, stand in for two
workers (the multi-process version, with a SIGKILL, is ``tests/e2e/test_jobs_e2e.py``). Passes
are plain calls at chosen instants: nothing sleeps, every tick is exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC
from typing import Any

import pytest
import redis.asyncio as aioredis

from hermes_queue.config import Settings
from hermes_queue.metrics.processes import WorkerMetrics
from hermes_queue.routing.configured import routing_config
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.start import RunStarter
from hermes_queue.schedules.definitions import parse_create, pause_changes, resume_changes
from hermes_queue.schedules.firing import Firing, job_timezone, tick_run_id
from hermes_queue.schedules.scheduler import Scheduler
from hermes_queue.store import SessionStore, open_store
from hermes_queue.store.jobs import JobRow
from tests.support.inprocess import running_worker
from tests.support.polling import eventually

T0 = 1_900_000_000.0  # the fake clock starts here (2030)
PERIOD = 1800.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclasses.dataclass
class Node:
    """What one worker brings: its own store object, Redis client and metrics."""

    scheduler: Scheduler
    store: SessionStore
    repository: RunRepository
    metrics: WorkerMetrics

    @property
    def firing(self) -> Firing:
        return self.scheduler.firing

    def fired(self, trigger: str = "schedule") -> float:
        return self.metrics.job_fires_total.labels(trigger=trigger)._value.get()

    def missed(self) -> float:
        return self.metrics.job_missed_ticks_total._value.get()


@contextlib.asynccontextmanager
async def node(settings: Settings, clock: Clock) -> AsyncIterator[Node]:
    redis = aioredis.Redis.from_url(settings.redis.url)
    store = await open_store(settings.store, redis_url=settings.redis.url)
    repository = RunRepository(redis, settings.redis.keys, settings.runs)
    metrics = WorkerMetrics()
    tz = job_timezone(settings.schedules)
    firing = Firing(store, RunStarter(repository), routing_config(settings.routing), tz, metrics)
    scheduler = Scheduler(firing, clock=clock)
    try:
        yield Node(scheduler, store, repository, metrics)
    finally:
        await store.close()
        await redis.aclose()


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
async def nodes(store_settings: Settings, clock: Clock) -> AsyncIterator[tuple[Node, Node]]:
    settings = store_settings.replace(scheduler_interval_seconds=0.0)
    async with node(settings, clock) as first, node(settings, clock) as second:
        yield first, second


async def make_job(store: SessionStore, schedule: str, now: float, **body: Any) -> JobRow:
    request = {"name": "report", "schedule": schedule, "prompt": "Summarise the day", **body}
    return await store.create_job(parse_create(request, now=now, tz=UTC))


async def both_pass(nodes: tuple[Node, Node], times: int = 3) -> None:
    """Several passes of both schedulers at the same instant, racing each other."""
    for _ in range(times):
        await asyncio.gather(*(n.scheduler.run_pass() for n in nodes))


async def fires(store: SessionStore, job_id: str) -> list[tuple[str, str, float | None]]:
    return [(r.run_id, r.trigger, r.tick) for r in reversed(await store.job_runs(job_id, 100))]


async def test_each_tick_fires_one_run_whoever_passes(
    nodes: tuple[Node, Node], clock: Clock, store_settings: Settings
) -> None:
    first, second = nodes
    job = await make_job(first.store, "every 30m", T0)
    ticks = [T0 + PERIOD * k for k in range(1, 5)]
    assert job.next_run_at == ticks[0]

    await both_pass(nodes)  # nothing due yet
    assert await fires(first.store, job.id) == []
    for n, tick in enumerate(ticks, start=1):
        clock.now = tick + 0.25
        await both_pass(nodes)
        recorded = await fires(second.store, job.id)
        assert len(recorded) == n
        row = await first.store.get_job(job.id)
        assert row is not None and row.next_run_at == tick + PERIOD
    expected = [
        (tick_run_id(store_settings.redis.namespace, job.id, t), "schedule", t) for t in ticks
    ]
    assert await fires(first.store, job.id) == expected
    assert first.fired() + second.fired() == len(ticks)
    for run_id, _, _ in expected:
        record = await first.repository.get(run_id)
        assert record is not None and record.session_id == job.session_id
        assert record.request.message == "Summarise the day"
    row = await first.store.get_job(job.id)
    assert row is not None and row.repeat_completed == len(ticks)


async def test_a_fire_cut_off_before_it_was_recorded_is_recorded_once(
    nodes: tuple[Node, Node], clock: Clock, store_settings: Settings
) -> None:
    """A worker killed between creating a tick's run and recording it: the next pass, on any
    worker, finds the run there and only records it."""
    first, second = nodes
    job = await make_job(first.store, "every 30m", T0)
    tick = T0 + PERIOD
    run_id = tick_run_id(store_settings.redis.namespace, job.id, tick)
    assert await first.firing.create_run(job, await first.firing.fire_session(job), run_id)
    clock.now = tick + 1
    assert await second.scheduler.run_pass() == 1
    assert await first.scheduler.run_pass() == 0
    assert await fires(first.store, job.id) == [(run_id, "schedule", tick)]
    assert second.fired() == 0  # nobody created a second run
    # And the creation itself refuses a second run for the tick.
    assert not await second.firing.create_run(job, await second.firing.fire_session(job), run_id)


async def test_ticks_missed_while_no_scheduler_ran_fire_once(
    nodes: tuple[Node, Node], clock: Clock
) -> None:
    first, _ = nodes
    job = await make_job(first.store, "every 30m", T0)
    clock.now = T0 + PERIOD * 4 + 60  # ticks 1-4 went by with no worker up
    assert await first.scheduler.run_pass() == 1
    assert await first.scheduler.run_pass() == 0
    recorded = await fires(first.store, job.id)
    assert [tick for _, _, tick in recorded] == [T0 + PERIOD]  # the oldest, once
    row = await first.store.get_job(job.id)
    assert row is not None and row.next_run_at == T0 + PERIOD * 5  # still on the grid
    assert first.missed() == 3


async def test_a_one_shot_missed_during_an_outage_fires_on_return(
    nodes: tuple[Node, Node], clock: Clock
) -> None:
    first, second = nodes
    job = await make_job(first.store, "2030-03-17T17:50:00Z", T0)
    clock.now = T0 + 86_400
    await both_pass(nodes)
    assert len(await fires(first.store, job.id)) == 1
    row = await second.store.get_job(job.id)
    assert row is not None and (row.state, row.enabled, row.next_run_at) == (
        "completed",
        False,
        None,
    )


async def test_pause_and_resume(nodes: tuple[Node, Node], clock: Clock) -> None:
    first, second = nodes
    job = await make_job(first.store, "every 30m", T0)
    await first.store.update_job(job.id, pause_changes(job, T0 + 10))
    clock.now = T0 + PERIOD * 3
    await both_pass(nodes)
    assert await fires(first.store, job.id) == []
    paused = await first.store.get_job(job.id)
    assert paused is not None
    assert (paused.state, paused.enabled, paused.paused_at) == ("paused", False, T0 + 10)

    # Resumed: the next tick counts from the resume, the paused ticks are not made up.
    await first.store.update_job(job.id, resume_changes(paused, clock.now, UTC))
    await both_pass(nodes)
    assert await fires(first.store, job.id) == []
    clock.now += PERIOD
    await both_pass(nodes)
    assert [tick for _, _, tick in await fires(second.store, job.id)] == [T0 + PERIOD * 4]
    assert first.missed() + second.missed() == 0


async def test_repeat_counts_down_and_completes_the_job(
    nodes: tuple[Node, Node], clock: Clock
) -> None:
    first, second = nodes
    job = await make_job(first.store, "0 */2 * * *", T0, repeat=2)  # every 2 hours
    for hour in (2, 4, 6, 8):
        clock.now = T0 + hour * 3600
        await both_pass(nodes)
    assert len(await fires(first.store, job.id)) == 2
    row = await second.store.get_job(job.id)
    assert row is not None
    assert (row.state, row.enabled, row.next_run_at) == ("completed", False, None)
    assert (row.repeat_times, row.repeat_completed) == (2, 2)


async def test_run_now_leaves_the_schedule_alone(nodes: tuple[Node, Node], clock: Clock) -> None:
    first, _ = nodes
    job = await make_job(first.store, "every 30m", T0, repeat=1)
    clock.now = T0 + 60
    run_id = await first.firing.fire_now(job, clock.now)
    row = await first.store.get_job(job.id)
    assert row is not None
    assert (row.next_run_at, row.repeat_completed, row.last_run_id) == (T0 + PERIOD, 0, run_id)
    assert await first.repository.get(run_id) is not None
    assert first.fired("manual") == 1
    clock.now = T0 + PERIOD
    await both_pass(nodes)
    assert [trigger for _, trigger, _ in await fires(first.store, job.id)] == [
        "manual",
        "schedule",
    ]


async def test_fires_are_ordinary_session_turns(store_settings: Settings, clock: Clock) -> None:
    """Run by a real worker: the job's session accumulates the transcript, and the end of
    each run is copied under the job (status, output), the failure of one too."""
    settings = store_settings.replace(scheduler_interval_seconds=0.0)
    async with node(settings, clock) as one, running_worker(settings):
        job = await make_job(one.store, "every 30m", T0, prompt="[fail] first")
        clock.now = T0 + PERIOD
        await one.scheduler.run_pass()
        await one.store.update_job(job.id, {"prompt": "second"})
        clock.now = T0 + PERIOD * 2
        await one.scheduler.run_pass()

        async def settled() -> list[str]:
            await one.scheduler.run_pass()
            return [r.status for r in await one.store.job_runs(job.id)]

        assert await eventually(settled, lambda s: s == ["completed", "failed"])
        row = await one.store.get_job(job.id)
        assert row is not None and (row.last_status, row.last_error) == ("ok", None)
        # The echo agent numbers the turn from the history it was given: the session's.
        assert row.last_run is not None and row.last_run.output == "Echo: second (turn 2)"
        failed = (await one.store.job_runs(job.id))[1]
        assert failed.error == "echo backend failure requested"
        messages = await one.store.get_messages(job.session_id)
        assert [(m.role, m.content) for m in messages][-2:] == [
            ("user", "second"),
            ("assistant", "Echo: second (turn 2)"),
        ]
