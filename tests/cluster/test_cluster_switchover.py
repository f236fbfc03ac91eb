"""A planned switchover on a Redis Cluster (``hermes-queue redis-switchover --replica``) under
load costs no request (issue 30 §3): three primaries with a replica each, two API processes and
two workers with ``redis_min_replicas = 1``, runs created and read over SSE (resuming on the
other replica) all along; the replica of shard 0's primary is promoted with a coordinated
``CLUSTER FAILOVER`` while they run. Every request answers 2xx (run creations and the readers'
requests alike), none hangs, every accepted run completes and its readers saw it exact (no
stream stalls, no event lost to a ``MOVED``), and the old primary serves as the promoted one's
replica.

Redis 7.0 closes the connections of the clients it paused for the switch, so a command in
flight then may or may not have run: reads are sent again, and so are run creations, which
recognise their own earlier send (redisio/cluster_retry.py, redisio/replication.py); the
promoted replica lacks the scripts, which are loaded where they were refused."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from hermes_queue.cli.switchover import switchover
from hermes_queue.config import Settings
from tests.support.load import Load
from tests.support.processes import Cluster
from tests.support.redis_cluster import RedisCluster


def _replica_of(cluster: RedisCluster, port: int) -> str:
    """``host:port`` of the node replicating the primary on ``port``."""
    for node in cluster.nodes:
        if node.port == port:
            continue
        with node.client(timeout=1) as client:
            info = client.info("replication")
        if info.get("role") == "slave" and int(info["master_port"]) == port:
            return f"{node.host}:{node.port}"
    raise AssertionError(f"no replica of :{port}")


@pytest.mark.timeout(240)
async def test_a_planned_switchover_under_load_fails_nothing(
    settings: Settings, replicated: RedisCluster
) -> None:
    deployment = Cluster(settings.replace(redis_url=replicated.url, redis_min_replicas=1))
    keys = deployment.settings.redis.keys
    said: list[str] = []
    try:
        urls = [await deployment.start_api(), await deployment.start_api()]
        for _ in range(2):
            await deployment.start_worker()
        headers = {"Authorization": f"Bearer {deployment.settings.api.api_key}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            load = Load(session, urls, clients=4, interval=0.2, max_runs=200)
            load.start()
            try:
                await load.wait_for_completed(6)
                old = replicated.node_of_slot(keys.shard_slot(0))
                replica = _replica_of(replicated, old.port)
                before = len(load.accepted)
                began = time.monotonic()
                done = await asyncio.to_thread(
                    switchover,
                    deployment.settings.redis,
                    replica=replica,
                    timeout=20,
                    say=said.append,
                )
                after = time.monotonic()
                await load.wait_for_completed(6, since=after)
                await load.finish()
            finally:
                await load.cancel()
            await load.settle_records(within=30)
        logs = "\n".join(p.log()[-1500:] for p in deployment.procs)
    finally:
        deployment.stop_all()

    new = replicated.node_of_slot(keys.shard_slot(0))
    assert f"{new.host}:{new.port}" == replica and done.new == (new.host, new.port), said
    with old.client(timeout=1) as former:
        assert former.info("replication")["role"] == "slave", said
    assert sum(1 for trace in load.accepted if trace.created_at >= began) > 4, said
    assert len(load.accepted) > before
    assert load.hangs == 0, f"{load.hangs} run creation(s) hung"
    assert not load.refused and not load.read_refused, (load.refused, load.read_refused, logs)
    for trace in load.accepted:
        assert trace.record.get("status") == "completed", (trace.run_id, trace.record, logs)
        assert not trace.problems(), (trace.run_id, trace.problems(), trace.events)
        assert trace.end == "terminal", (trace.run_id, trace.end)
