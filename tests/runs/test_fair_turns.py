"""Fair turns between tenants (issue 34 §3), against a real Redis: the order workers take
queued runs in (``keys.turn_order_at``), as the run scripts keep it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.runs.repository import RunRepository
from tests.support.tenant_runs import queue, repository, turn_order


async def take_next(repo: RunRepository, redis: Any, keys: Keys) -> str:
    """What a worker does with one free slot: the lowest turn, claimed."""
    (head,) = await redis.zrange(keys.turn_order_at(0), 0, 0)
    run_id = head.decode()
    assert await repo.claim(run_id, "w1") is not None
    return run_id


async def test_a_tenant_queueing_behind_a_flood_is_next(
    redis: Any, settings: Settings, keys: Keys
) -> None:
    repo = repository(redis, settings)
    flood = await queue(repo, "a", 200)
    first = await take_next(repo, redis, keys)  # a's flood is being served
    (b_run,) = await queue(repo, "b", 1)
    taken = [await take_next(repo, redis, keys) for _ in range(3)]
    # b's run goes right after the run of a's in service: not behind a's other 199.
    assert first == flood[0] and taken[0] in (flood[1], b_run) and b_run in taken[:2]


async def test_backlogged_tenants_alternate_by_weight_and_each_keeps_its_order(
    redis: Any, settings: Settings, keys: Keys
) -> None:
    repo = repository(redis, settings, tenant_weights="a=2")
    a_runs = await queue(repo, "a", 60)
    b_runs = await queue(repo, "b", 60)
    taken = [await take_next(repo, redis, keys) for _ in range(60)]
    owners = Counter("a" if run_id in a_runs else "b" for run_id in taken)
    assert owners == {"a": 40, "b": 20}
    # Within a tenant, first queued is first taken.
    assert [r for r in taken if r in a_runs] == a_runs[:40]
    assert [r for r in taken if r in b_runs] == b_runs[:20]


async def test_a_tenant_alone_takes_every_turn_in_order_and_owes_nothing_after(
    redis: Any, settings: Settings, keys: Keys
) -> None:
    repo = repository(redis, settings)
    alone = await queue(repo, "a", 30)
    assert [await take_next(repo, redis, keys) for _ in range(30)] == alone
    # a ran 30 turns while nobody waited: queued beside b now, they alternate from the start.
    later_a = await queue(repo, "a", 3)
    b_runs = await queue(repo, "b", 3)
    taken = [await take_next(repo, redis, keys) for _ in range(6)]
    rounds = [set(taken[i : i + 2]) for i in range(0, 6, 2)]  # a tie goes either way
    assert rounds == [{later_a[i], b_runs[i]} for i in range(3)]
    assert await redis.hget(keys.fair_at(0), "n:a") is None  # none of a's left queued


async def test_a_requeued_run_goes_first_and_a_stopped_one_leaves_the_order(
    redis: Any, settings: Settings, keys: Keys
) -> None:
    repo = repository(redis, settings)
    runs = await queue(repo, "a", 3)
    lost = await take_next(repo, redis, keys)
    others = await queue(repo, "b", 2)
    await redis.zadd(keys.leases, {lost: 0})  # its worker stopped beating long ago
    assert await repo.leases.reap(lost) == "requeued"
    # It already had its turn: it goes before everything still queued.
    assert await take_next(repo, redis, keys) == lost
    assert (await repo.request_stop(others[0])).status == "cancelled"
    order = await turn_order(redis, keys)
    assert lost == runs[0] and sorted(order) == sorted([*runs[1:], others[1]])
    assert sorted(m.decode() for m in await redis.zrange(keys.queue, 0, -1)) == sorted(order)
    assert await redis.hmget(keys.fair_at(0), ["n:a", "n:b"]) == [b"2", b"1"]
