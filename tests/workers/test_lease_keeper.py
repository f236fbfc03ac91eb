"""The lease keeper (``workers/lease_keeper.py``) on one Redis: a run's lease is renewed by its
thread while the event loop is blocked, from an idle keeper that held no connection of its own;
it lets go of its connection once it has had nothing to renew for a while."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio as aioredis

from hermes_queue.config import Settings
from hermes_queue.redisio.embedded import EmbeddedRedis
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.workers import lease_clock, lease_keeper
from hermes_queue.workers.lease_keeper import LeaseKeeper
from tests.support.blocked_loop import LINGER, check_leases_renewed_while_blocked
from tests.support.redis_stats import commands_for


@pytest.mark.timeout(60)
async def test_leases_are_renewed_while_the_loop_is_blocked_from_an_idle_keeper(
    settings: Settings, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_keeper, "LINGER_SECONDS", LINGER)
    admin = redis.Redis.from_url(redis_url)
    try:
        await check_leases_renewed_while_blocked(
            settings, admin, [lambda: redis.Redis.from_url(redis_url)]
        )
    finally:
        admin.close()


async def test_a_beat_is_one_round_trip_even_on_a_redis_that_lost_its_scripts(
    settings: Settings,
) -> None:
    """Each beat is one pipelined round trip (no ``SCRIPT EXISTS`` before the renewals), and a
    Redis without the renewal script (restarted, or a promoted replica) has it loaded and the
    lease renewed in the same beat. On a private Redis, whose command counts are the beat's."""
    server = EmbeddedRedis.start()
    private = aioredis.Redis.from_url(server.url)
    settings = settings.replace(redis_url=server.url)
    keeper: LeaseKeeper | None = None
    try:
        repository = RunRepository(private, settings.redis.keys, settings.runs)
        run_id = new_run_id()
        await repository.create(NewRun(run_id, run_id, TurnRequest("hi")))
        attempt = await repository.claim(run_id, "w")
        assert attempt is not None
        signals: list[tuple[str, int]] = []
        keeper = LeaseKeeper(
            settings.redis,
            repository.leases,
            "w",
            asyncio.get_running_loop(),
            lambda run, verdict: signals.append((run, verdict)),
            4,
            presence=private,
        )
        runs = [(run_id, attempt.number)]
        lease = settings.redis.keys.leases_of(run_id)

        async def beat() -> None:
            await asyncio.to_thread(keeper.beat, runs)

        await beat()  # its connection made, the script loaded where it was missing
        calls = await commands_for(private, beat)
        assert calls["evalsha"] == 1
        assert calls["script"] + calls["script|exists"] + calls["script|load"] == 0
        await private.script_flush()
        renewed = await private.zscore(lease, run_id)
        calls = await commands_for(private, beat)
        assert calls["script"] + calls["script|load"] == 1 and calls["evalsha"] == 2
        assert (await private.zscore(lease, run_id) or 0) >= (renewed or 0) > 0
        await asyncio.sleep(0)  # a verdict would be handed to the loop: none is due
        assert signals == []
    finally:
        if keeper is not None:
            keeper._drop_connections()
        await private.aclose()
        server.stop()


async def test_a_lease_is_surely_held_by_the_clock_only_while_no_reaper_could_act(
    redis: aioredis.Redis, settings: Settings
) -> None:
    """``surely_held`` vouches for a lease from the time its claim or last renewal that landed
    was sent, up to ``lease_seconds`` less two heartbeats (the reaper acts only once the deadline
    that renewal set has passed); a lease that a beat found lost, or a run taken over by a later
    attempt, is never vouched for again."""
    repository = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    await repository.create(NewRun(run_id, run_id, TurnRequest("hi")))
    first = await repository.claim(run_id, "w")
    assert first is not None
    keeper = LeaseKeeper(
        settings.redis,
        repository.leases,
        "w",
        asyncio.get_running_loop(),
        lambda run, verdict: None,
        4,
        presence=redis,
    )  # its thread is not started: each beat is the test's
    try:
        window = settings.runs.lease_seconds - 2 * settings.runs.heartbeat_seconds
        keeper.track(first, lease_clock.lease_clock().earlier(window + 0.5))  # a claim long sent
        assert not keeper.surely_held(first)
        now = lease_clock.lease_clock()  # the wall clock alone moved on (a paused VM, say)
        keeper.track(first, lease_clock.Instant(now.boot, now.wall - window - 0.5))
        assert not keeper.surely_held(first)
        await asyncio.to_thread(keeper.beat, [(run_id, first.number)])  # renewed just now
        assert keeper.surely_held(first)

        # Its worker froze: the lease lapsed, the reaper put the run back, another claim took
        # it. The first attempt's next beat finds its lease lost.
        await redis.zadd(settings.redis.keys.leases_of(run_id), {run_id: 0})
        assert await repository.leases.reap(run_id) == "requeued"
        second = await repository.claim(run_id, "w2")
        assert second is not None and second.number == first.number + 1
        await asyncio.to_thread(keeper.beat, [(run_id, first.number)])
        assert not keeper.surely_held(first)

        keeper.track(second, lease_clock.lease_clock())
        assert keeper.surely_held(second) and not keeper.surely_held(first)
        keeper.untrack(first)  # an earlier attempt ending leaves the later one alone
        assert keeper.surely_held(second)
        keeper.untrack(second)
        assert not keeper.surely_held(second)
    finally:
        await keeper.aclose()
