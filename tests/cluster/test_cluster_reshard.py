"""A slot migration under load (issue 35): ``redis-cli --cluster reshard`` moves the slots of
some shards from one primary to another while runs stream. Every run ends terminal and every
reader's view is exact; runs of the moved shards stream through the move (their appends meet
``MOVED``/``ASK``, the hub's and the workers' per-node connections regroup)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from hermes_queue.config import Settings
from tests.support.load import Load, record_problems
from tests.support.polling import eventually
from tests.support.processes import Cluster
from tests.support.redis_cluster import REDIS_CLI, RedisCluster

RUNS = 300  # at 4 clients every 0.3 s: runs are still created once the move is over


def _node_id(cluster: RedisCluster, port: int) -> str:
    node = next(n for n in cluster.nodes if n.port == port)
    with node.client(timeout=2) as client:
        raw = client.execute_command("CLUSTER", "MYID")
    return raw.decode() if isinstance(raw, bytes) else str(raw)


@pytest.mark.timeout(240)
async def test_a_slot_migration_under_load_loses_nothing(
    cluster_settings: Settings, redis_cluster: RedisCluster
) -> None:
    deployment = Cluster(cluster_settings)
    keys = cluster_settings.redis.keys
    source = redis_cluster.node_of_slot(keys.shard_slot(0))
    target = next(n for n in redis_cluster.primary_nodes() if n.port != source.port)
    try:
        urls = [await deployment.start_api()]
        for _ in range(2):
            await deployment.start_worker(echo_token_delay=0.02)
        headers = {"Authorization": f"Bearer {cluster_settings.api.api_key}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            load = Load(session, urls, clients=4, interval=0.3, max_runs=RUNS)
            load.start()
            try:
                await load.wait_for_completed(5, within=60)

                def streaming_there() -> list[str]:
                    return [
                        t.run_id
                        for t in load.accepted
                        if keys.shard_of(t.run_id) == 0 and t.frames and not t.end
                    ]

                # Moved while a run of shard 0 is streaming to a reader.
                await eventually(streaming_there, within=60, every=0.01)
                reshard = await asyncio.create_subprocess_exec(
                    REDIS_CLI,
                    *("--cluster", "reshard", f"{source.host}:{source.port}"),
                    *("--cluster-from", _node_id(redis_cluster, source.port)),
                    *("--cluster-to", _node_id(redis_cluster, target.port)),
                    *("--cluster-slots", "1200", "--cluster-yes"),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                )
                out, _ = await asyncio.wait_for(reshard.communicate(), 120)
                assert reshard.returncode == 0, out.decode()[-2000:]
                assert len(load.accepted) < RUNS, "the load ended before the move did"
                await load.wait_for_completed(5, since=time.monotonic(), within=60)
                await load.finish(within=90)
            finally:
                await load.cancel()
            await load.settle_records(within=60)
        logs = "\n".join(p.log()[-1500:] for p in deployment.procs)
    finally:
        deployment.stop_all()

    assert redis_cluster.node_of_slot(keys.shard_slot(0)).port == target.port, "shard 0 moved"
    assert load.hangs == 0 and not load.refused, (load.hangs, load.refused, logs)
    # Every run, those of the moved shards created before, during and after the move too.
    for trace in load.accepted:
        assert trace.record.get("status") == "completed", (trace.run_id, record_problems(trace))
        assert not trace.problems(), (trace.run_id, trace.problems(), trace.events, logs)
