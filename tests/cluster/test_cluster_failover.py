"""SIGKILL one primary of a Redis Cluster under load (issue 25): three primaries with a replica
each, two API processes and two workers configured with ``redis_min_replicas = 1``, runs with
SSE readers (half of them on the other replica, every second one dropping its connection and
resuming with ``Last-Event-ID``). The killed primary's replica is promoted; every accepted run
ends terminal, no reader sees a frame twice, and new runs go through again, with no
hermes-queue process restarted. Until the killed node is back (as the promoted one's replica)
the writes of its shard that wait for a replica answer 503 ``redis_unavailable``, as with
Sentinel (tests/failover)."""

from __future__ import annotations

import time

import aiohttp
import pytest

from hermes_queue.config import Settings
from tests.support.load import Load, record_problems
from tests.support.polling import eventually
from tests.support.processes import Cluster
from tests.support.redis_cluster import RedisCluster


@pytest.mark.timeout(240)
async def test_a_primary_killed_under_load(settings: Settings, replicated: RedisCluster) -> None:
    deployment = Cluster(
        settings.replace(redis_url=replicated.url, redis_min_replicas=1, max_attempts=3)
    )
    keys = deployment.settings.redis.keys
    try:
        urls = [await deployment.start_api(), await deployment.start_api()]
        for _ in range(2):
            await deployment.start_worker()
        headers = {"Authorization": f"Bearer {deployment.settings.api.api_key}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            load = Load(session, urls, clients=4, max_runs=120)
            load.start()
            try:
                await load.wait_for_completed(6)
                old = replicated.node_of_slot(keys.shard_slot(0))
                served = {
                    shard
                    for shard in keys.shard_ids
                    if replicated.node_of_slot(keys.shard_slot(shard)) is old
                }

                def streaming_there() -> list[str]:
                    return [
                        t.run_id
                        for t in load.accepted
                        if keys.shard_of(t.run_id) in served and t.frames and not t.end
                    ]

                # Killed while a run it holds is streaming to a reader.
                in_flight = await eventually(streaming_there, within=60, every=0.01)
                old.kill()
                await replicated.wait_for_failover(old, keys.shard_slot(0))
                await replicated.restart(old)  # the promoted primary's replica again
                back = time.monotonic()
                await load.wait_for_completed(6, since=back)
                await load.finish()
            finally:
                await load.cancel()
            await load.settle_records(within=deployment.settings.runs.lease_seconds * 4 + 10)
        logs = "\n".join(p.log()[-1500:] for p in deployment.procs)
    finally:
        deployment.stop_all()

    assert load.hangs == 0, f"{load.hangs} run creation(s) hung"
    unexpected = {k: v for k, v in load.refused.items() if k != "503 redis_unavailable"}
    assert not unexpected, f"refusals other than 503 redis_unavailable: {unexpected}"
    for trace in load.accepted:
        assert not record_problems(trace), (trace.run_id, record_problems(trace), logs)
        assert not trace.problems(), (trace.run_id, trace.problems(), trace.events)
    assert any(trace.resumes for trace in load.accepted), "no reader resumed"
    cut = [t for t in load.accepted if t.run_id in in_flight]
    assert cut and all(t.record.get("status") == "completed" for t in cut)
    assert load.completed_since(back) >= 6
