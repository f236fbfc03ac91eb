"""The lease keeper on a Redis Cluster while a slot is migrated: a renewal of a run whose slot is
on the move is refused (``ASK``, ``TRYAGAIN``), and must cost only that run's renewal, never
the renewals of every run on the same node (a shard's slot holds a sixteenth of all runs' keys,
so its move can outlast a lease: the node's other runs would then all be reaped)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from hermes_queue.config import Settings
from hermes_queue.redisio.connect import connect
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.workers.lease_clock import lease_clock
from hermes_queue.workers.lease_keeper import LeaseKeeper, RenewalsRefused
from tests.support.redis_cluster import RedisCluster
from tests.support.slot_migration import Migration, neighbours, run_slot

# A lease deadline set by the test, which any renewal moves (to now + the lease).
STALE = 1.0


@pytest.mark.timeout(90)
async def test_a_run_on_a_moving_slot_costs_only_its_own_renewal(
    cluster_settings: Settings, redis_cluster: RedisCluster
) -> None:
    keys = cluster_settings.redis.keys
    redis = connect(cluster_settings.redis)
    repository = RunRepository(redis, keys, cluster_settings.runs)

    moving, staying = neighbours(redis_cluster, keys)
    attempts = []
    for run_id in (moving, staying):
        assert await repository.create(NewRun(run_id, run_id, TurnRequest("hi")))
        attempt = await repository.claim(run_id, "w")
        assert attempt is not None
        attempts.append(attempt)
    keeper = LeaseKeeper(
        cluster_settings.redis,
        repository.leases,
        "w",
        asyncio.get_running_loop(),
        lambda *_: None,
        4,
        presence=redis,
    )  # its thread is not started: each beat is the test's
    runs = [(a.run_id, a.number) for a in attempts]

    async def deadline(run_id: str) -> float:
        return float(await redis.zscore(keys.leases_of(run_id), run_id) or 0)

    try:
        for attempt in attempts:
            keeper.track(attempt, lease_clock())
        await asyncio.to_thread(keeper.beat, runs)

        migration = Migration(redis_cluster, run_slot(keys, moving))
        migration.begin()
        migration.move(keys.run(moving))  # its record moved, its shard's lease set not yet
        for run_id in (moving, staying):  # a deadline no renewal leaves: 1 ms after 1970
            await redis.zadd(keys.leases_of(run_id), {run_id: STALE}, xx=True)
        with pytest.raises(RenewalsRefused):
            await asyncio.to_thread(keeper.beat, runs)
        assert await deadline(staying) > STALE  # renewed all the same
        assert await deadline(moving) == STALE

        # The move completes: the next beat finds the slot on its new node.
        migration.move(keys.leases_of(moving), keys.events(moving))
        migration.finish()
        await redis.zadd(keys.leases_of(moving), {moving: STALE}, xx=True)
        with contextlib.suppress(RenewalsRefused):  # MOVED at most once: the table refreshed
            await asyncio.to_thread(keeper.beat, runs)
        await asyncio.to_thread(keeper.beat, runs)
        assert await deadline(moving) > STALE
        assert keeper.surely_held(attempts[0]) and keeper.surely_held(attempts[1])
    finally:
        await keeper.aclose()
        await redis.aclose()
