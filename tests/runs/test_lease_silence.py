"""Lease time counts only while Redis is heard from (``runs/lua/prelude.lua``: leases_heard).

A silence on a shard's leases longer than a lease can spare (Redis restarted, failed over or
stalled: nobody could renew) moves every deadline of the shard on by the silence before the
reaper reads them; without one, a lapsed lease is a dead worker's and is reaped as always. The
silence is made here by setting when the shard was last heard from, the Redis clock's way."""

from __future__ import annotations

from typing import Any

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.leases import quiet_ms
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest

SILENCE_MS = 60_000


async def redis_now_ms(redis: Any) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def claimed(redis: Any, settings: Settings) -> tuple[RunRepository, str]:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    assert await repo.create(NewRun(run_id, "s1", TurnRequest("hello")))
    assert await repo.claim(run_id, "w1") is not None
    return repo, run_id


async def test_a_lease_that_lapsed_while_redis_was_silent_moves_on_by_the_silence(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    repo, run_id = await claimed(redis, settings)
    now = await redis_now_ms(redis)
    # Its last renewal landed just before Redis went silent for a minute: it lapsed meanwhile.
    await redis.set(keys.leases_heard_of(run_id), now - SILENCE_MS)
    await redis.zadd(keys.leases, {run_id: now - SILENCE_MS + 1_000})

    assert await repo.leases.expired() == []  # the reaper's pass hears the silence first
    deadline = await redis.zscore(keys.leases, run_id)
    assert deadline is not None and now < deadline <= now + 1_000 + 1_000  # a second still
    assert await repo.leases.reap(run_id) == "alive"
    record = await repo.get(run_id)
    assert record is not None and record.status == "running" and record.attempt == 1


async def test_a_lease_that_lapsed_while_redis_was_heard_from_is_reaped(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    """No silence (the claim was just heard): a lapsed lease is a dead worker's, as before."""
    repo, run_id = await claimed(redis, settings)
    await redis.zadd(keys.leases, {run_id: await redis_now_ms(redis) - 1_000})
    assert await repo.leases.expired() == [run_id]
    assert await repo.leases.reap(run_id) == "requeued"


async def test_a_silence_shorter_than_a_lease_can_spare_moves_nothing(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    repo, run_id = await claimed(redis, settings)
    now = await redis_now_ms(redis)
    quiet = quiet_ms(settings.runs)
    await redis.set(keys.leases_heard_of(run_id), now - quiet + 500)
    await redis.zadd(keys.leases, {run_id: now - 1_000})
    assert await repo.leases.expired() == [run_id]


async def test_a_renewal_after_a_silence_keeps_every_lease_of_the_shard(
    redis: Any, keys: Keys, settings: Settings
) -> None:
    """The first script to run after the silence moves the deadlines, whichever it is: here
    one worker's renewal, and another worker's run, not yet renewed, is kept too."""
    repo, renewed = await claimed(redis, settings)
    _, waiting = await claimed(redis, settings)
    now = await redis_now_ms(redis)
    await redis.set(keys.leases_heard_of(renewed), now - SILENCE_MS)
    for run_id in (renewed, waiting):
        await redis.zadd(keys.leases, {run_id: now - SILENCE_MS + 2_000})
    script = redis.register_script(repo.leases.renew_script)
    run_keys, args = repo.leases.renew_args(renewed, 1)
    assert await script(keys=run_keys, args=args) == 0
    assert await repo.leases.expired() == []
    waiting_deadline = await redis.zscore(keys.leases, waiting)
    assert waiting_deadline is not None and waiting_deadline > now
