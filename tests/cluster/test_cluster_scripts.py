"""The run scripts and the scheduler on a three-primary Redis Cluster, called in process: the
transitions that the end-to-end tests do not reach (stop of a queued run, a session's parked
turn promoted, a lapsed lease reaped), each script single-slot (the cluster refuses a script
whose keys span slots), and a scheduled tick fired once by two racing schedulers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC
from typing import cast

import pytest
from redis.asyncio.cluster import RedisCluster

from hermes_queue.config import Settings
from hermes_queue.metrics.processes import WorkerMetrics
from hermes_queue.queueview.snapshot import snapshot
from hermes_queue.redisio.connect import connect_url
from hermes_queue.redisio.replication import NotReplicated
from hermes_queue.routing.configured import routing_config
from hermes_queue.runs.model import FailReason, NewRun, Persist
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.start import RunStarter
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.schedules.definitions import parse_create
from hermes_queue.schedules.firing import Firing, job_timezone, tick_run_id
from hermes_queue.schedules.scheduler import Scheduler
from hermes_queue.store import open_store
from hermes_queue.store.jobs import JobRow
from hermes_queue.workers.shard_listener import listen_shards
from tests.support.polling import eventually

T0 = 1_900_000_000.0


@pytest.fixture
async def repository(cluster_settings: Settings) -> AsyncIterator[RunRepository]:
    redis = connect_url(cluster_settings.redis.url)
    repo = RunRepository(redis, cluster_settings.redis.keys, cluster_settings.runs)
    try:
        yield repo
    finally:
        await repo.aclose()
        await redis.aclose()


def new_run(run_id: str, session_id: str = "") -> NewRun:
    return NewRun(
        run_id=run_id,
        session_id=session_id or run_id,
        request=TurnRequest(message="hi"),
        model="echo",
        persist=Persist.SESSION if session_id else None,
    )


async def test_stop_of_a_queued_run(repository: RunRepository) -> None:
    run_id = new_run_id()
    assert await repository.create(new_run(run_id))
    stopped = await repository.request_stop(run_id)
    assert stopped.found and stopped.status == "cancelled"
    record = await repository.get(run_id)
    assert record is not None and record.status == "cancelled"


async def test_a_parked_session_turn_is_promoted_when_the_first_ends(
    repository: RunRepository,
) -> None:
    placement = repository.placement
    first, second = placement.new_run_id("sess"), placement.new_run_id("sess")
    admitted = await repository.create_session_run(new_run(first, "sess"), strategy="enqueue")
    assert admitted.verdict == "created"
    admission = await repository.create_session_run(new_run(second, "sess"), strategy="enqueue")
    assert (admission.verdict, admission.blocking_run_id) == ("waiting", first)
    with pytest.raises(ValueError):  # a run outside the session's shard is refused
        other = next(r for r in iter(new_run_id, None) if not placement.fits(r, "sess"))
        await repository.create_session_run(new_run(other, "sess"), strategy="enqueue")
    attempt = await repository.claim(first, "w1")
    assert attempt is not None and await repository.claim(second, "w1") is None
    assert await attempt.fail(FailReason.AGENT_ERROR, "boom")
    assert await repository.session_runs("sess") == (second, [])
    assert await repository.claim(second, "w1") is not None


async def test_a_lapsed_lease_is_reaped_on_its_shard(
    cluster_settings: Settings, repository: RunRepository
) -> None:
    run_id = new_run_id()
    assert await repository.create(new_run(run_id))
    attempt = await repository.claim(run_id, "gone-worker")
    assert attempt is not None

    async def reaped() -> dict[str, str]:
        return await repository.leases.reap_expired()

    result = await eventually(reaped, lambda r: run_id in r, within=15)
    assert result[run_id] == "requeued"  # max_attempts 2: back to the queue
    depth = (await snapshot(repository.redis, repository.keys, 3.0, default_slots=1)).depth
    assert depth.ready == 1 and depth.running == 0


@contextlib.asynccontextmanager
async def scheduler(settings: Settings, clock: list[float]) -> AsyncIterator[Scheduler]:
    redis = connect_url(settings.redis.url)
    store = await open_store(settings.store, redis_url=settings.redis.url)
    repository = RunRepository(redis, settings.redis.keys, settings.runs)
    firing = Firing(
        store,
        RunStarter(repository),
        routing_config(settings.routing),
        job_timezone(settings.schedules),
        WorkerMetrics(),
    )
    try:
        yield Scheduler(firing, clock=lambda: clock[0])
    finally:
        await store.close()
        await repository.aclose()
        await redis.aclose()


async def test_each_tick_fires_once_on_a_cluster(cluster_settings: Settings) -> None:
    """Two schedulers race over ticks whose id falls outside the job session's shard: the
    first pins the tick's run id, so both create the same run, once."""
    settings = cluster_settings.replace(scheduler_interval_seconds=0.0)
    keys = settings.redis.keys
    clock = [T0]
    async with scheduler(settings, clock) as one, scheduler(settings, clock) as two:
        store = one.firing.store
        while True:  # a job whose first tick's id is not in its session's shard
            request = {"name": "r", "schedule": "every 30m", "prompt": "p"}
            job: JobRow = await store.create_job(parse_create(request, now=T0, tz=UTC))
            base = tick_run_id(keys.namespace, job.id, T0 + 1800)
            if not one.firing.repository.placement.fits(base, job.session_id):
                break
            await store.delete_job(job.id)
        for tick in (1, 2, 3):
            clock[0] = T0 + 1800 * tick + 0.25
            for _ in range(3):
                await asyncio.gather(one.run_pass(), two.run_pass())
        fires = list(reversed(await store.job_runs(job.id, 100)))
        assert len(fires) == 3
        assert fires[0].run_id.startswith(base + "_")  # pinned into the session's shard
        for fire in fires:
            assert one.firing.repository.placement.fits(fire.run_id, job.session_id)
            assert await one.firing.repository.get(fire.run_id) is not None


async def test_acknowledged_writes_wait_on_the_runs_node(cluster_settings: Settings) -> None:
    """``redis_min_replicas`` on a cluster: the script and ``WAIT`` go to the primary of the
    run's slot; with no replica there the write stands and says so (replication.py)."""
    settings = cluster_settings.replace(redis_min_replicas=1)
    redis = connect_url(settings.redis.url)
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    try:
        run_id = new_run_id()
        with pytest.raises(NotReplicated) as refused:
            await repo.create(new_run(run_id))
        assert refused.value.acknowledged == 0
        record = await repo.get(run_id)
        assert record is not None and record.status == "queued"
    finally:
        await repo.aclose()
        await redis.aclose()


async def test_wake_ups_and_stops_reach_the_shard_listeners(repository: RunRepository) -> None:
    """Creating a run wakes workers on its shard's sharded channel; a stop request of a running
    run goes out on its shard's control channel (workers/shard_listener.py)."""
    keys = repository.keys
    heard: list[tuple[str, str]] = []
    subscribed: set[int] = set()
    cluster = cast("RedisCluster", repository.redis)
    listening = asyncio.create_task(
        listen_shards(
            cluster,
            keys,
            lambda kind, _shard, data: heard.append((kind, data)),
            subscribed.add,
        )
    )
    try:
        await eventually(lambda: subscribed == set(keys.shard_ids), within=10)
        run_ids = [new_run_id() for _ in range(8)]
        for run_id in run_ids:
            assert await repository.create(new_run(run_id))
        await eventually(lambda: {d for k, d in heard if k == "wake"} == set(run_ids))
        assert await repository.claim(run_ids[0], "w1") is not None
        assert (await repository.request_stop(run_ids[0])).status == "stopping"
        await eventually(lambda: ("control", run_ids[0]) in heard)
    finally:
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening
