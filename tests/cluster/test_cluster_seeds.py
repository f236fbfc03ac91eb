"""A cluster client whose commands failed on every node at once comes back when the cluster
does (redisio/cluster_seeds.py). redis-py drops each node a command timed out on from the
nodes it rebuilds its slot table from; with all of them dropped, its client answered "Redis
Cluster cannot be connected … None" for good (redis/redis-py#3693): here, after every primary
was paused (SIGSTOP) under commands in flight on each, the asyncio and the synchronous (lease
keeper's) clients read again once the nodes are resumed, and rebuild their slot table. It
failed a worker's shutdown in CI (tests/cluster/test_cluster_idle_worker.py)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

from hermes_queue.redisio.cluster import (
    ClusterTarget,
    connect_cluster,
    connect_cluster_sync,
    parse_cluster_url,
)
from tests.support.polling import eventually
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_group import Node

# A command in flight on a paused node fails after this long.
TIMEOUT = 0.5


@contextmanager
def paused(nodes: list[Node]) -> Iterator[None]:
    for node in nodes:
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for node in nodes:
            assert node.process is not None
            os.kill(node.process.pid, signal.SIGCONT)


@pytest.fixture
def target(redis_cluster: RedisCluster) -> ClusterTarget:
    parsed = parse_cluster_url(redis_cluster.url)
    assert parsed is not None
    return parsed


@pytest.fixture
def keys(redis_cluster: RedisCluster, namespace: str) -> list[str]:
    return list(redis_cluster.key_per_primary(f"{namespace}:seeds").values())


@pytest.mark.timeout(90)
async def test_the_asyncio_client_comes_back_after_every_node_failed(
    redis_cluster: RedisCluster, target: ClusterTarget, keys: list[str]
) -> None:
    client = connect_cluster(target, socket_timeout=TIMEOUT)
    try:
        await asyncio.gather(*(client.set(key, "kept") for key in keys))
        with paused(redis_cluster.primary_nodes()):
            failed = await asyncio.gather(
                *(client.get(key) for key in keys), return_exceptions=True
            )
        assert all(isinstance(f, (RedisConnectionError, RedisTimeoutError)) for f in failed), failed
        await eventually(redis_cluster.ok, what="the cluster ok again")
        client.switchover_wait = 10.0  # type: ignore[attr-defined]
        assert [await client.get(key) for key in keys] == [b"kept"] * len(keys)
    finally:
        await client.aclose()


@pytest.mark.timeout(90)
async def test_the_synchronous_client_comes_back_after_every_node_failed(
    redis_cluster: RedisCluster, target: ClusterTarget, keys: list[str]
) -> None:
    client = connect_cluster_sync(target, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
    try:
        for key in keys:
            client.set(key, "kept")
        with paused(redis_cluster.primary_nodes()):
            for key in keys:
                # Its failed command rebuilds the slot table at once, which fails too.
                with pytest.raises(
                    (RedisConnectionError, RedisTimeoutError, RedisClusterException)
                ):
                    client.get(key)
        await eventually(redis_cluster.ok, what="the cluster ok again")
        # What a MOVED or a failover makes it do: its nodes answer again without one.
        client.nodes_manager.initialize()
        assert [client.get(key) for key in keys] == [b"kept"] * len(keys)
    finally:
        client.close()
