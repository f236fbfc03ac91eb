"""Reaping on a Redis Cluster (issue 35): each shard is scanned by one process at a time, the
holder of its reaper lease (``runs/shard_leases.py``). Two worker processes share the shards;
one is SIGKILLed and the other takes its shards over and reaps a lapsed run in one of them."""

from __future__ import annotations

import pytest

from hermes_queue.config import Settings
from hermes_queue.redisio.connect import connect
from hermes_queue.runs.model import NewRun, RunStatus
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from tests.support.polling import eventually
from tests.support.processes import Cluster, Proc


@pytest.mark.timeout(120)
async def test_two_workers_share_the_shards_and_a_dead_ones_are_taken_over(
    cluster_settings: Settings,
) -> None:
    settings = cluster_settings.replace(reaper_interval_seconds=0.2)  # a lease: 1 s
    keys = settings.redis.keys
    redis = connect(settings.redis)
    deployment = Cluster(settings)
    try:
        workers = [await deployment.start_worker(), await deployment.start_worker()]

        async def holders() -> dict[int, int]:
            """shard -> pid of the worker holding its reaper lease."""
            found = {}
            for shard in keys.shard_ids:
                value = await redis.get(keys.reaper_lease_at(shard))
                if value is not None:
                    found[shard] = int(value.decode().split(":")[1])
            return found

        def shared(held: dict[int, int]) -> bool:
            pids = {w.process.pid for w in workers}
            return len(held) == keys.shards and set(held.values()) == pids

        held = await eventually(holders, shared, within=30, what="both workers holding shards")
        victim, survivor = workers
        lost = [shard for shard, pid in held.items() if pid == victim.process.pid]
        assert lost and len(lost) < keys.shards

        Proc.kill(victim)
        # A run of one of the dead worker's shards whose lease lapsed: only a reaper of that
        # shard settles it, and the dead worker no longer reaps.
        repo = RunRepository(redis, keys, settings.runs)
        run_id = next(r for r in iter(new_run_id, None) if keys.shard_of(r) == lost[0])
        survivor.pause()  # so that it does not take the run from the queue before we claim it
        try:
            assert await repo.create(NewRun(run_id, "s1", TurnRequest("hello")))
            assert await repo.claim(run_id, "a-worker-that-died") is not None
            await redis.zadd(keys.leases_of(run_id), {run_id: 0})
        finally:
            survivor.resume()

        def all_survivors(now: dict[int, int]) -> bool:
            return len(now) == keys.shards and set(now.values()) == {survivor.process.pid}

        await eventually(holders, all_survivors, within=30, what="the survivor holding all")
        record = await eventually(
            lambda: repo.get(run_id),
            lambda r: r is not None and r.status == RunStatus.COMPLETED,
            within=30,
            what="the lapsed run reaped and run again",
        )
        assert record is not None and record.attempt == 2
    finally:
        deployment.stop_all()
        await redis.aclose()
