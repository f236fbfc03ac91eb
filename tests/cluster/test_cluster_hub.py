"""The stream hub on a Redis Cluster (issue 35): one follower per node, not per shard, so an
API process holds two connections per node however many shards its streams are in, and every
stream is read exactly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import cast

import pytest
import redis.asyncio as aioredis

from hermes_queue.config import Settings
from hermes_queue.events import EventType
from hermes_queue.keys import Keys
from hermes_queue.redisio.connect import connect_url
from hermes_queue.runs.placement import new_run_id
from hermes_queue.streams.codec import entry_fields, published
from hermes_queue.streams.hub import StreamHub
from hermes_queue.streams.sharded import ShardedFollower
from tests.support.polling import eventually
from tests.support.redis_cluster import RedisCluster
from tests.support.slot_migration import Migration, neighbours, run_slot


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


@pytest.mark.timeout(90)
async def test_a_slot_on_the_move_holds_back_its_own_streams_not_the_nodes_others(
    cluster_settings: Settings, cluster_client: aioredis.Redis, redis_cluster: RedisCluster
) -> None:
    """While a slot is migrated, reading a stream already moved is answered ``ASK``: that
    stream waits for the move to end (then the follower of its new node takes it), and the
    other streams the node's follower reads go on, with no reconnect."""
    keys = cluster_settings.redis.keys

    moving, staying = neighbours(redis_cluster, keys)
    hub = StreamHub(cluster_client, keys, poll_ms=200, client_name=f"{keys.namespace}-move")
    await hub.start()
    followers = cast(ShardedFollower, hub.follower)
    try:
        seen: dict[str, list[int]] = {moving: [], staying: []}
        ready = asyncio.Barrier(3)

        async def read(run_id: str) -> None:
            async with hub.subscribe(run_id) as sub:
                assert await sub.get(timeout=0.01) is None  # replayed: now followed
                await ready.wait()
                async for event in sub:
                    seen[run_id].append(event.seq)

        readers = [asyncio.create_task(read(run_id)) for run_id in (moving, staying)]
        await asyncio.wait_for(ready.wait(), 20)
        for run_id in (moving, staying):
            await xadd(cluster_client, keys, run_id, 1, EventType.MESSAGE_DELTA)
        await eventually(lambda: seen == {moving: [1], staying: [1]}, within=20)
        losses = hub.connection_losses

        migration = Migration(redis_cluster, run_slot(keys, moving))
        migration.begin()
        migration.move(keys.events(moving))
        # The polls read the moved stream on its old node: ASK, and nothing else happens.
        await eventually(
            lambda: sum(f.unreadable["ASK"] for f in followers.followers) >= 2, within=20
        )
        # Not published: only a read finds it, in the same polls as the moved stream's.
        fields = entry_fields(EventType.MESSAGE_DELTA, 2, 1, time.time(), "sess", {"n": 2})
        await cluster_client.xadd(keys.events(staying), dict(fields))
        await eventually(lambda: seen[staying] == [1, 2], within=20)
        assert hub.connection_losses == losses
        assert seen[moving] == [1]

        migration.finish()
        await xadd(cluster_client, keys, moving, 2, EventType.RUN_COMPLETED)
        await xadd(cluster_client, keys, staying, 3, EventType.RUN_COMPLETED)
        await asyncio.wait_for(asyncio.gather(*readers), 30)
        assert seen == {moving: [1, 2], staying: [1, 2, 3]}
    finally:
        await hub.aclose()
