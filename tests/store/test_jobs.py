"""The job operations of the store contract, on SQLite and PostgreSQL alike (see conftest.py).

What the scheduler and the jobs API rely on: a job and its session are created together, the
due query, and above all that recording a fire is idempotent and moves the schedule once,
whichever of several store objects (standing in for several workers) records it.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from hermes_queue.store import SessionStore
from hermes_queue.store.jobs import KEPT_RUNS, FireRecord, JobRow
from hermes_queue.store.migrations import LATEST_VERSION
from tests.store.conftest import StoreFactory, old_session

T0 = 1_800_000_000.0


def job(job_id: str = "0123456789ab", **changes: object) -> JobRow:
    row = JobRow(
        id=job_id,
        name="Morning report",
        prompt="Summarise the news",
        schedule={"kind": "interval", "minutes": 30, "display": "every 30m"},
        session_id=f"cron_{job_id}",
        created_at=T0,
        skills=["news"],
        next_run_at=T0 + 1800,
        origin={"platform": "api_server"},
    )
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]


def fire(run_id: str, tick: float | None, next_run_at: float | None, **more: object) -> FireRecord:
    trigger = "schedule" if tick is not None else "manual"
    base = FireRecord("0123456789ab", run_id, trigger, (tick or T0) + 0.5, tick, next_run_at)
    return dataclasses.replace(base, **more)  # type: ignore[arg-type]


async def test_a_job_is_created_with_its_session(store: SessionStore) -> None:
    created = await store.create_job(job())
    assert created == job()
    session = await store.get_session("cron_0123456789ab")
    assert session is not None and session.source == "cron"
    assert session.title == "Job 0123456789ab: Morning report"
    assert await store.get_job("0123456789ab") == created
    assert await store.get_job("ffffffffffff") is None


async def test_a_taken_title_leaves_the_job_session_untitled(store: SessionStore) -> None:
    await store.create_session("other", title="Job 0123456789ab: Morning report")
    await store.create_job(job())
    session = await store.get_session("cron_0123456789ab")
    assert session is not None and session.title is None


async def test_list_due_update_delete(store: SessionStore) -> None:
    await store.create_job(job("aaaaaaaaaaaa", created_at=T0, next_run_at=T0 + 10))
    await store.create_job(job("bbbbbbbbbbbb", created_at=T0 + 1, next_run_at=T0 + 5))
    await store.create_job(
        job("cccccccccccc", created_at=T0 + 2, enabled=False, state="paused", next_run_at=None)
    )
    assert [j.id for j in await store.list_jobs()] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    everything = await store.list_jobs(include_disabled=True)
    assert [j.id for j in everything] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
    assert [j.id for j in await store.due_jobs(T0 + 4)] == []
    assert [j.id for j in await store.due_jobs(T0 + 10)] == ["bbbbbbbbbbbb", "aaaaaaaaaaaa"]
    assert [j.id for j in await store.due_jobs(T0 + 10, limit=1)] == ["bbbbbbbbbbbb"]

    updated = await store.update_job(
        "aaaaaaaaaaaa", {"enabled": False, "state": "paused", "next_run_at": None, "skills": []}
    )
    assert updated is not None and not updated.enabled and updated.skills == []
    assert [j.id for j in await store.due_jobs(T0 + 10)] == ["bbbbbbbbbbbb"]
    assert await store.update_job("ffffffffffff", {"name": "x"}) is None
    with pytest.raises(ValueError):
        await store.update_job("aaaaaaaaaaaa", {"repeat_completed": 0})

    assert await store.delete_job("bbbbbbbbbbbb") is True
    assert await store.delete_job("bbbbbbbbbbbb") is False
    # The transcript outlives the job.
    assert await store.get_session("cron_bbbbbbbbbbbb") is not None


async def test_recording_a_fire_moves_the_schedule_once(store: SessionStore) -> None:
    await store.create_job(job())
    tick = T0 + 1800
    assert await store.record_fire(fire("run_1", tick, tick + 1800)) is True
    assert await store.record_fire(fire("run_1", tick, tick + 1800)) is False
    assert await store.job_fire_recorded("run_1")
    recorded = await store.get_job("0123456789ab")
    assert recorded is not None
    assert recorded.next_run_at == tick + 1800
    assert recorded.repeat_completed == 1
    assert (recorded.last_run_id, recorded.last_run_at) == ("run_1", tick + 0.5)
    assert recorded.last_run is not None and recorded.last_run.status == "queued"
    # A stale fire of a tick the job no longer waits for is recorded, but moves nothing.
    assert await store.record_fire(fire("run_0", tick - 1800, tick)) is True
    again = await store.get_job("0123456789ab")
    assert again is not None and again.next_run_at == tick + 1800 and again.repeat_completed == 2


async def test_concurrent_recorders_count_a_tick_once(store_factory: StoreFactory) -> None:
    first = store_factory()
    await first.migrate()
    await first.create_job(job(repeat_times=3))
    tick = T0 + 1800
    stores = [first, *(store_factory() for _ in range(3))]
    results = await asyncio.gather(
        *(s.record_fire(fire("run_1", tick, tick + 1800)) for s in stores)
    )
    assert sorted(results) == [False, False, False, True]
    row = await first.get_job("0123456789ab")
    assert row is not None and row.repeat_completed == 1 and row.next_run_at == tick + 1800


async def test_repeat_exhaustion_and_one_shots_complete_the_job(store: SessionStore) -> None:
    await store.create_job(job(repeat_times=2))
    tick = T0 + 1800
    await store.record_fire(fire("run_1", tick, tick + 1800))
    await store.record_fire(fire("run_2", tick + 1800, tick + 3600))
    done = await store.get_job("0123456789ab")
    assert done is not None
    assert (done.enabled, done.state, done.next_run_at, done.repeat_completed) == (
        False,
        "completed",
        None,
        2,
    )
    assert await store.due_jobs(tick + 10_000) == []

    await store.create_job(job("0000000000aa", next_run_at=T0 + 60))
    once = fire("run_once", T0 + 60, None, job_id="0000000000aa")
    assert await store.record_fire(once)
    row = await store.get_job("0000000000aa")
    assert row is not None and (row.enabled, row.state) == (False, "completed")


async def test_manual_fires_leave_the_schedule_alone(store: SessionStore) -> None:
    await store.create_job(job(repeat_times=1))
    assert await store.record_fire(fire("run_now", None, None, fired_at=T0 + 5))
    row = await store.get_job("0123456789ab")
    assert row is not None
    assert (row.next_run_at, row.repeat_completed, row.enabled) == (T0 + 1800, 0, True)
    assert (row.last_run_id, row.last_run_at) == ("run_now", T0 + 5)
    assert [r.trigger for r in await store.job_runs("0123456789ab")] == ["manual"]


async def test_settling_fires(store: SessionStore) -> None:
    await store.create_job(job())
    await store.record_fire(fire("run_1", T0 + 1800, T0 + 3600))
    await store.record_fire(fire("run_2", T0 + 3600, T0 + 5400))
    assert [r.run_id for r in await store.open_job_runs()] == ["run_1", "run_2"]
    assert await store.settle_job_run("run_2", status="running") is True
    assert await store.settle_job_run("run_2", status="running") is False
    assert await store.settle_job_run(
        "run_2", status="completed", output="done", finished_at=T0 + 3700, last_status="ok"
    )
    assert not await store.settle_job_run(
        "run_2", status="failed", error="late", finished_at=T0 + 3800, last_status="error"
    )
    # run_1 ended after run_2 was fired: its record settles, the job keeps run_2's status.
    assert await store.settle_job_run(
        "run_1", status="failed", error="boom", finished_at=T0 + 3900, last_status="error"
    )
    row = await store.get_job("0123456789ab")
    assert row is not None and (row.last_status, row.last_error) == ("ok", None)
    assert row.last_run is not None and (row.last_run.run_id, row.last_run.output) == (
        "run_2",
        "done",
    )
    runs = await store.job_runs("0123456789ab")
    assert [(r.run_id, r.status, r.error) for r in runs] == [
        ("run_2", "completed", None),
        ("run_1", "failed", "boom"),
    ]
    assert await store.open_job_runs() == []


async def test_only_the_latest_fires_are_kept(store: SessionStore) -> None:
    await store.create_job(job(next_run_at=None))
    for n in range(KEPT_RUNS + 5):
        await store.record_fire(fire(f"run_{n:03d}", None, None, fired_at=T0 + n))
    runs = await store.job_runs("0123456789ab", limit=1000)
    assert len(runs) == KEPT_RUNS
    assert runs[0].run_id == f"run_{KEPT_RUNS + 4:03d}"


async def test_deleting_a_job_drops_its_fires_and_refuses_new_ones(store: SessionStore) -> None:
    await store.create_job(job())
    await store.record_fire(fire("run_1", T0 + 1800, T0 + 3600))
    assert await store.delete_job("0123456789ab")
    assert await store.job_runs("0123456789ab") == []
    assert await store.record_fire(fire("run_2", T0 + 3600, T0 + 5400)) is False


async def test_jobs_migration_upgrades_a_version_3_database(store_factory: StoreFactory) -> None:
    old = store_factory()
    assert await old.migrate(target=3) == [1, 2, 3]
    await old_session(old, "kept")
    new = store_factory()
    assert await new.migrate() == list(range(4, LATEST_VERSION + 1))
    await new.create_job(job())
    assert await new.get_session("kept") is not None
