"""The stream hub on a Redis Cluster (issue 35): one follower per node, not per shard, so an
API process holds two connections per node however many shards its streams are in, and every
stream is read exactly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from hermes_queue.config import Settings
from hermes_queue.events import EventType
from hermes_queue.keys import Keys
from hermes_queue.redisio.connect import connect_url
from hermes_queue.runs.placement import new_run_id
from hermes_queue.streams.codec import entry_fields, published
from hermes_queue.streams.hub import StreamHub
from tests.support.redis_cluster import RedisCluster


@pytest.fixture
async def cluster_client(cluster_settings: Settings) -> AsyncIterator[aioredis.Redis]:
    client = connect_url(cluster_settings.redis.url)
    try:
        yield client
    finally:
        await client.aclose()


async def xadd(redis: aioredis.Redis, keys: Keys, run_id: str, seq: int, type_: str) -> None:
    """One entry as the run scripts write it, published on its sharded channel."""
    fields = entry_fields(type_, seq, 1, time.time(), "sess", {"n": seq})
    raw_id = await redis.xadd(keys.events(run_id), dict(fields))
    entry_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
    await redis.execute_command("SPUBLISH", keys.events(run_id), published(entry_id, fields))


@pytest.mark.timeout(60)
async def test_the_hub_follows_every_shards_streams_on_two_connections_per_node(
    cluster_settings: Settings, cluster_client: aioredis.Redis, redis_cluster: RedisCluster
) -> None:
    keys = cluster_settings.redis.keys
    name = f"{keys.namespace}-hub"
    run_ids: list[str] = []
    for shard in keys.shard_ids:  # one run in every shard
        run_ids.append(next(r for r in iter(new_run_id, None) if keys.shard_of(r) == shard))
    hub = StreamHub(cluster_client, keys, poll_ms=30_000, client_name=name)
    await hub.start()
    try:
        ready = asyncio.Barrier(len(run_ids) + 1)

        async def read(run_id: str) -> list[int]:
            async with hub.subscribe(run_id) as sub:
                assert await sub.get(timeout=0.01) is None  # replayed: now followed
                await ready.wait()
                return [event.seq async for event in sub]

        readers = [asyncio.create_task(read(run_id)) for run_id in run_ids]
        await asyncio.wait_for(ready.wait(), 20)
        for run_id in run_ids:
            await xadd(cluster_client, keys, run_id, 1, EventType.MESSAGE_DELTA)
            await xadd(cluster_client, keys, run_id, 2, EventType.RUN_COMPLETED)
        seen = await asyncio.wait_for(asyncio.gather(*readers), 20)
        assert seen == [[1, 2]] * len(run_ids)
        primaries = redis_cluster.primary_nodes()
        per_node = []
        for node in primaries:
            with node.client(timeout=2) as client:
                names = [c["name"] for c in client.client_list()]
            per_node.append(sum(1 for n in names if n.startswith(name)))
        assert all(count <= 2 for count in per_node), per_node
        assert hub.stats()["streams"] == 0
    finally:
        await hub.aclose()
