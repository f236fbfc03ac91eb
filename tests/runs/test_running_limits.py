"""Running limits per tenant (``tenant_max_running``), against a real Redis: the claim holds a
run of a tenant at its limit (out of the turn order, still queued and counted ready), and
every way a run stops running lets the tenant's next held run back."""

from __future__ import annotations

from typing import Any

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.attempt import Attempt
from hermes_queue.runs.repository import RunRepository
from tests.support.tenant_runs import queue, repository, turn_order


async def fair(redis: Any, keys: Keys) -> dict[str, int]:
    raw = await redis.hgetall(keys.fair_at(0))
    return {k.decode(): int(float(v)) for k, v in raw.items() if not k.startswith((b"l:", b"v"))}


async def claim_all(repo: RunRepository, redis: Any, keys: Keys) -> dict[str, Attempt]:
    """What workers with free slots do: claim every run in the turn order, in turn, until
    none is left there (held runs leave it)."""
    claimed: dict[str, Attempt] = {}
    while order := await turn_order(redis, keys):
        for run_id in order:
            attempt = await repo.claim(run_id, "w1")
            if attempt is not None:
                claimed[run_id] = attempt
    return claimed


async def test_a_tenant_at_its_limit_is_held_and_others_run(
    redis: Any, settings: Settings, keys: Keys
) -> None:
    repo = repository(redis, settings, tenant_max_running="a=2")
    a_runs = await queue(repo, "a", 5)
    b_runs = await queue(repo, "b", 3)
    claimed = await claim_all(repo, redis, keys)
    # a runs its first two (in its own order), b all three; a's other three wait, held.
    assert set(claimed) == {*a_runs[:2], *b_runs}
    assert await fair(redis, keys) == {"n:a": 3, "r:a": 2, "h:a": 3, "r:b": 3}
    held = await redis.zrange(keys.held_prefix_at(0) + "a", 0, -1)
    assert [m.decode() for m in held] == a_runs[2:]
    # Still queued (ready, waiting): in the queue that waits and backpressure read.
    assert await redis.zcard(keys.queue_at(0)) == 3
    # One of a's ends: its next held run is back in the turn order, and claimed.
    assert await claimed[a_runs[0]].cancel()
    assert await turn_order(redis, keys) == [a_runs[2]]
    more = await claim_all(repo, redis, keys)
    assert list(more) == [a_runs[2]]
    assert await fair(redis, keys) == {"n:a": 2, "r:a": 2, "h:a": 2, "r:b": 3}


async def test_a_hand_back_and_a_reap_release_a_held_run(
    redis: Any, settings: Settings, keys: Keys
) -> None:
    repo = repository(redis, settings, tenant_max_running="a=1")
    a_runs = await queue(repo, "a", 3)
    claimed = await claim_all(repo, redis, keys)
    assert list(claimed) == [a_runs[0]]
    # The worker hands its run back (shutdown): it is queued first again, and a held one back.
    await claimed[a_runs[0]].hand_back()
    assert set(await turn_order(redis, keys)) == {a_runs[0], a_runs[1]}
    assert (await fair(redis, keys))["n:a"] == 3
    assert "r:a" not in await fair(redis, keys)
    again = await claim_all(repo, redis, keys)
    assert len(again) == 1
    (running,) = again
    # Its lease lapses: the reaper requeues it, and the count goes down with it.
    await redis.zadd(keys.leases_at(0), {running: 0})
    assert await repo.leases.reap(running) == "requeued"
    assert "r:a" not in await fair(redis, keys)
    assert running in await turn_order(redis, keys)


async def test_stopping_a_held_run_and_the_reapers_backstop(
    redis: Any, settings: Settings, keys: Keys
) -> None:
    repo = repository(redis, settings, tenant_max_running="a=1")
    a_runs = await queue(repo, "a", 3)
    await claim_all(repo, redis, keys)
    assert (await fair(redis, keys))["h:a"] == 2
    # A held run stopped: cancelled, out of its held set and of the counts.
    assert (await repo.request_stop(a_runs[1])).status == "cancelled"
    assert await fair(redis, keys) == {"n:a": 1, "r:a": 1, "h:a": 1}
    # The limit removed (a restart with other settings): the reapers' pass frees what is held.
    unlimited = repository(redis, settings, tenant_max_running="")
    assert await unlimited.release_held() == 1
    assert await turn_order(redis, keys) == [a_runs[2]]
    assert "h:a" not in await fair(redis, keys)
    # With the limit still in place there is no room: nothing moves.
    assert await repo.release_held() == 0


async def test_the_default_tenant_is_never_counted_nor_held(
    redis: Any, settings: Settings, keys: Keys
) -> None:
    repo = repository(redis, settings, tenant_max_running="*=1")
    runs = await queue(repo, "default", 3)
    claimed = await claim_all(repo, redis, keys)
    assert set(claimed) == set(runs)
    assert await fair(redis, keys) == {}
    record = await redis.hgetall(keys.run(runs[0]))
    assert b"running_in" not in record and b"held_key" not in record
