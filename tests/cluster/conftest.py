"""A loopback Redis Cluster (``tests/support/redis_cluster.py``) and settings pointing at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_queue.config import Settings
from tests.support.redis_cluster import RedisCluster


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisCluster]:
    """Three primaries, no replicas; shared by a module's tests (each has its namespace)."""
    with RedisCluster(primaries=3) as started:
        yield started


@pytest.fixture
def replicated() -> Iterator[RedisCluster]:
    """Three primaries with a replica each (failover and switchover tests), one per test."""
    with RedisCluster(primaries=3, replicas=1) as started:
        yield started


@pytest.fixture
def cluster_settings(settings: Settings, redis_cluster: RedisCluster) -> Settings:
    return settings.replace(redis_url=redis_cluster.url, redis_cluster_shards=16)
