"""A worker's cluster client closes its surplus idle connections (``redisio.cluster.trim_idle``),
which reaches into redis-py's ``ClusterNode`` (``_free``, ``_connections``): pinned here."""

from __future__ import annotations

import asyncio

from hermes_queue.config import Settings
from hermes_queue.redisio.cluster import connect_cluster, parse_cluster_url, trim_idle
from tests.support.polling import eventually
from tests.support.redis_cluster import RedisCluster


async def test_surplus_idle_connections_are_closed_and_the_client_still_works(
    cluster_settings: Settings, redis_cluster: RedisCluster
) -> None:
    name = f"{cluster_settings.redis.namespace}-trim"
    target = parse_cluster_url(cluster_settings.redis.url)
    assert target is not None
    client = connect_cluster(target, client_name=name)
    key = f"{cluster_settings.redis.namespace}:trim"
    node = redis_cluster.node_of_slot(client.keyslot(key))

    def connected() -> int:
        with node.client(timeout=2) as admin:
            return sum(1 for c in admin.client_list() if c["name"] == name)

    try:
        await asyncio.gather(*(client.blpop([key], timeout=0.2) for _ in range(4)))
        assert connected() == 4  # four commands in flight at once: four connections
        assert await trim_idle(client) == 3
        await eventually(connected, lambda n: n == 1, within=10, what="one connection left")
        await client.set(key, "1")
        assert await client.get(key) == b"1"
        assert connected() == 1
    finally:
        await client.delete(key)
        await client.aclose()
