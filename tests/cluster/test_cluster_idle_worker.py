"""An idle worker on a Redis Cluster holds at most two connections per node (issue 35): its
wake-up listener's and its pool's one (``redisio.cluster.trim_forever`` closes the surplus each
second while the worker has no run in hand); the
lease keeper's thread holds none until it has a run to renew, and then renews it while the
event loop is blocked (``workers/lease_keeper.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis
import redis.asyncio as aioredis

from hermes_queue.config import Settings
from hermes_queue.redisio.cluster import TRIM_SECONDS
from hermes_queue.workers import lease_keeper
from tests.support.blocked_loop import LINGER, check_leases_renewed_while_blocked
from tests.support.inprocess import running_worker
from tests.support.polling import eventually
from tests.support.redis_cluster import RedisCluster


def node_clients(cluster: RedisCluster) -> list[Callable[[], redis.Redis]]:
    return [lambda node=node: node.client(timeout=2) for node in cluster.primary_nodes()]


async def connections_of(node: aioredis.Redis) -> dict[int, str]:
    """The node's connections by id -> name, less the one asking."""
    me = await node.client_id()
    return {int(c["id"]): c["name"] for c in await node.client_list() if int(c["id"]) != me}


@pytest.mark.timeout(90)
async def test_an_idle_worker_holds_at_most_two_connections_per_node(
    cluster_settings: Settings, redis_cluster: RedisCluster
) -> None:
    # Everything the test asks of the nodes is asked without blocking the event loop the
    # worker runs on: a loop held for seconds timed the worker's connects out (and redis-py's
    # cluster client then closes all of its connections, the test's own commands too).
    nodes = [
        aioredis.Redis(host=node.host, port=node.port, socket_timeout=5)
        for node in redis_cluster.primary_nodes()
    ]
    # A key on each node, for the side tasks below.
    surplus = redis_cluster.key_per_primary(f"{cluster_settings.redis.namespace}:surplus")
    assert len(surplus) == len(nodes)
    try:
        before = [set(await connections_of(node)) for node in nodes]
        async with running_worker(cluster_settings) as worker:
            keeper = worker.handler.runtime.keeper  # type: ignore[union-attr]
            pool = worker.pool

            async def workers_connections() -> list[dict[int, str]]:
                return [
                    {i: n for i, n in (await connections_of(node)).items() if i not in old}
                    for node, old in zip(nodes, before, strict=True)
                ]

            # Side tasks meeting on a node: three commands in flight at once on each node open
            # three connections there; the idle worker's own trim closes the surplus (nobody
            # calls trim_idle here).
            await asyncio.gather(
                *(pool.blpop([key], timeout=0.3) for key in surplus.values() for _ in range(3))
            )
            per_node = await eventually(
                workers_connections,
                lambda found: all(len(conns) <= 2 for conns in found),
                within=TRIM_SECONDS / 2,  # sooner than the busy worker's trim could do it
                what="an idle worker with at most two connections per node",
            )
            assert not keeper.renewing
    finally:
        for node in nodes:
            await node.aclose()
    for conns in per_node:
        names = sorted(conns.values())
        # One wake-up listener per node (named), the rest the pool's (unnamed).
        assert sum(n.startswith("hermes-queue:listener:") for n in names) == 1, per_node
        assert not any("lease-keeper" in n for n in names), per_node


@pytest.mark.timeout(90)
async def test_leases_are_renewed_while_the_loop_is_blocked_from_an_idle_keeper(
    cluster_settings: Settings, redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_keeper, "LINGER_SECONDS", LINGER)
    with redis_cluster.client() as admin:
        await check_leases_renewed_while_blocked(
            cluster_settings, admin, node_clients(redis_cluster)
        )
