"""Queue figures stay cheap at 100,000 queued runs: the Redis work per snapshot does not grow.

Timing asserts would be flaky and say little; instead this counts the commands Redis executed
(``INFO commandstats`` deltas, which include commands run inside scripts) for a snapshot of a
small queue and of a 100,000-run one, and requires the same number. A private Redis server
keeps the count free of other tests' traffic.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.queueview.snapshot import admission, snapshot
from hermes_queue.redisio.embedded import EmbeddedRedis
from tests.support.redis_stats import commands_for

PAGE = 50


@pytest.fixture(scope="module")
def private_redis_url() -> Iterator[str]:
    server = EmbeddedRedis.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
async def private(private_redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(private_redis_url)
    await client.flushdb()  # a server of this module's own: nobody else's keys
    try:
        yield client
    finally:
        await client.aclose()


async def fill(redis: aioredis.Redis, keys: Keys, queued: int, leased: int, blocked: int) -> None:
    """Queue entries (60 % ready, 40 % deferred), leased runs with records, parked runs."""
    now_ms = int(time.time() * 1000)
    chunk = 10_000
    for start in range(0, queued, chunk):
        async with redis.pipeline(transaction=False) as pipe:
            members = {
                f"run_q{i}": now_ms - 60_000 + i if i < queued * 0.6 else now_ms + 3_600_000 + i
                for i in range(start, min(queued, start + chunk))
            }
            pipe.zadd(keys.queue, members)
            await pipe.execute()
    async with redis.pipeline(transaction=False) as pipe:
        for i in range(min(queued, 2 * PAGE)):  # the records of the runs a page can list
            pipe.hset(keys.run(f"run_q{i}"), mapping={"status": "queued", "session_id": f"s{i}"})
        for i in range(leased):
            run_id = f"run_l{i}"
            pipe.zadd(keys.leases, {run_id: now_ms + 3_600_000 + i})
            pipe.hset(keys.run(run_id), mapping={"status": "running", "started_at": time.time()})
        pipe.zadd(keys.blocked, {keys.run(f"run_b{i}"): now_ms + i for i in range(blocked)})
        pipe.zadd(keys.workers, {"w1": now_ms, "w2": now_ms})
        pipe.hset(keys.worker("w1"), mapping={"slots": 16, "busy": 16})
        pipe.hset(keys.worker("w2"), mapping={"slots": 16, "busy": 4})
        await pipe.execute()


def queue_snapshot(redis: aioredis.Redis, settings: Settings, limit: int = 0) -> Any:
    """The snapshot as the API reads it for these settings (api/ops/operations.py)."""
    return snapshot(
        redis,
        settings.redis.keys,
        settings.runs.lease_seconds,
        default_slots=settings.worker.concurrency,
        limit=limit,
    )


async def test_snapshot_command_count_does_not_grow_with_the_queue(
    private: aioredis.Redis, private_redis_url: str, namespace: str
) -> None:
    small, large = Keys(f"{namespace}s"), Keys(f"{namespace}l")
    # Both hold more than a page of ready and of leased runs: a listed run costs one read.
    await fill(private, small, queued=2 * PAGE, leased=PAGE + 10, blocked=2)
    await fill(private, large, queued=100_000, leased=10_000, blocked=5_000)
    base = Settings.of(redis_url=private_redis_url, max_ready_depth=10, max_ready_age_seconds=30)
    counts: dict[str, list[int]] = {}
    snapshots = {}
    for keys in (small, large):
        settings = base.replace(namespace=keys.namespace)
        client = aioredis.Redis.from_url(private_redis_url)
        try:
            await client.ping()  # connection set-up is not part of the bill

            async def full(settings: Settings = settings, client: aioredis.Redis = client) -> None:
                snapshots[settings.redis.namespace] = await queue_snapshot(
                    client, settings, limit=PAGE
                )

            async def scrape(settings: Settings = settings, client: aioredis.Redis = client) -> Any:
                return await queue_snapshot(client, settings)

            async def admit(settings: Settings = settings, client: aioredis.Redis = client) -> Any:
                api = settings.api
                return await admission(
                    client, settings.redis.keys, api.max_ready_depth, api.max_ready_age_seconds
                )

            counts[keys.namespace] = [
                (await commands_for(client, full)).total(),
                (await commands_for(client, scrape)).total(),
                (await commands_for(client, admit)).total(),
            ]
        finally:
            await client.aclose()

    assert counts[small.namespace] == counts[large.namespace]
    # And small in absolute terms: the two pages and the two workers, plus a few fixed reads.
    full_count, scrape_count, admit_count = counts[large.namespace]
    assert full_count <= 14 + 2 * PAGE + 2
    assert scrape_count <= 12 + 2
    assert admit_count <= 8

    big = snapshots[large.namespace]
    assert (big.depth.ready, big.depth.deferred) == (60_000, 40_000)
    assert (big.depth.running, big.depth.blocked) == (10_000, 5_000)
    assert big.depth.oldest_ready_age_seconds >= 60
    assert len(big.in_flight) == PAGE
    assert [run.position for run in big.queued] == list(range(1, PAGE + 1))
    assert big.queued[0].run_id == "run_q0"  # the oldest ready run: next to be taken
    assert (len(big.workers), big.slots, big.free_slots) == (2, 32, 12)
    assert big.desired_workers == 4375  # ceil((60,000 + 10,000) / 16)
