"""SIGKILL the Redis primary under load: two API processes and two workers configured through
Sentinel, ``redis_min_replicas = 1``, runs with SSE readers (half of them on the other replica,
every second one dropping its connection and resuming with ``Last-Event-ID``).

With one replica, the promoted replica has no replica of its own until the killed node is back,
so acknowledged writes (``WAIT 1``) answer 503 ``redis_unavailable`` meanwhile; the test brings
the node back as a supervisor of a node without persistence must (the promoted primary's
replica: ``SentinelGroup.restart``) and new runs succeed again, with no hermes-queue process
restarted.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from hermes_queue.config import Settings
from tests.support.load import Load, record_problems
from tests.support.processes import Cluster
from tests.support.redis_group import SentinelGroup


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    with SentinelGroup() as started:
        yield started


@pytest.fixture
async def deployment(group: SentinelGroup, settings: Settings) -> AsyncIterator[Cluster]:
    cluster = Cluster(settings.replace(redis_url=group.url, redis_min_replicas=1, max_attempts=3))
    try:
        yield cluster
    finally:
        cluster.stop_all()


@pytest.mark.timeout(240)
async def test_primary_killed_under_load(group: SentinelGroup, deployment: Cluster) -> None:
    urls = [await deployment.start_api(), await deployment.start_api()]
    for _ in range(2):
        await deployment.start_worker()
    headers = {"Authorization": f"Bearer {deployment.settings.api.api_key}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        load = Load(session, urls, clients=4, max_runs=120)
        load.start()
        try:
            await load.wait_for_completed(6)
            old = group.kill_primary()
            await group.wait_for_new_primary(old)
            await group.restart(old)
            back = time.monotonic()
            await load.wait_for_completed(6, since=back)
            await load.finish()
        finally:
            await load.cancel()
        await load.settle_records(within=deployment.settings.runs.lease_seconds * 4 + 10)
    logs = "\n".join(p.log()[-1500:] for p in deployment.procs)

    assert load.hangs == 0, f"{load.hangs} run creation(s) hung"
    unexpected = {k: v for k, v in load.refused.items() if k != "503 redis_unavailable"}
    assert not unexpected, f"refusals other than 503 redis_unavailable: {unexpected}"
    for trace in load.accepted:
        assert not record_problems(trace), (trace.run_id, record_problems(trace), logs)
        assert not trace.problems(), (trace.run_id, trace.problems(), trace.events)
    assert any(trace.resumes for trace in load.accepted), "no reader resumed"
    assert any(trace.api != urls[0] for trace in load.accepted)
    assert load.completed_since(back) >= 6
