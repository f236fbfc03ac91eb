"""A planned Redis switchover (``hermes-queue redis-switchover``) under load costs no request:
two API processes and two workers configured through Sentinel with ``redis_min_replicas = 1``,
runs created and read over SSE (resuming on the other replica) all along; the primary is
switched to its replica while they run. Every request answers 2xx, every accepted run is
still there afterwards and completes, and the old primary follows the new one.

An unplanned failover (the primary SIGKILLed) still fails fast and explicitly: with a short
``redis_switchover_wait_seconds`` a request that finds no primary answers 503
``redis_unavailable`` with ``Retry-After`` within that wait and its timeouts, never hangs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from hermes_queue.cli.switchover import SwitchoverError, switchover
from hermes_queue.config import Settings
from hermes_queue.redisio.connect import COMMAND_TIMEOUT, CONNECT_TIMEOUT
from tests.support.load import Load, record_problems
from tests.support.processes import Cluster
from tests.support.redis_group import SentinelGroup

UNPLANNED_WAIT = 0.5


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    with SentinelGroup() as started:
        yield started


@pytest.fixture
async def deployment(group: SentinelGroup, settings: Settings) -> AsyncIterator[Cluster]:
    cluster = Cluster(settings.replace(redis_url=group.url, redis_min_replicas=1))
    try:
        yield cluster
    finally:
        cluster.stop_all()


@pytest.mark.timeout(240)
async def test_planned_switchover_under_load_fails_nothing(
    group: SentinelGroup, deployment: Cluster
) -> None:
    urls = [await deployment.start_api(), await deployment.start_api()]
    for _ in range(2):
        await deployment.start_worker()
    old = group.primary()
    said: list[str] = []
    headers = {"Authorization": f"Bearer {deployment.settings.api.api_key}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        load = Load(session, urls, clients=6, interval=0.2, max_runs=300)
        load.start()
        try:
            await load.wait_for_completed(6)
            before = len(load.accepted)
            began = time.monotonic()
            done = await asyncio.to_thread(
                switchover, deployment.settings.redis, replica=None, timeout=10, say=said.append
            )
            after = time.monotonic()
            await load.wait_for_completed(6, since=after)
            await load.finish()
        finally:
            await load.cancel()
        await load.settle_records(within=30)
    errors = [line for p in deployment.procs for line in p.errors()][:20]
    logs = "\n".join([*errors, *(p.log()[-1500:] for p in deployment.procs)])

    new = group.primary()
    assert new is not old and done.new == (new.host, new.port), said
    with old.client() as former:
        replication = former.info("replication")
    assert replication["role"] == "slave" and int(replication["master_port"]) == new.port
    # Runs were created from the moment the switch began on, and not one request failed.
    assert sum(1 for trace in load.accepted if trace.created_at >= began) > 6, said
    assert len(load.accepted) > before
    assert load.hangs == 0 and not load.refused, (dict(load.refused), said, logs)
    for trace in load.accepted:
        assert not record_problems(trace), (trace.run_id, record_problems(trace), logs)
        assert not trace.problems(), (trace.run_id, trace.problems(), trace.events)
        assert trace.end == "terminal", (trace.run_id, trace.end)


async def test_switchover_refuses_a_single_server(settings: Settings) -> None:
    with pytest.raises(SwitchoverError, match="needs Sentinel"):
        switchover(settings.redis, replica=None, timeout=1, say=print)


@pytest.mark.timeout(120)
async def test_unplanned_failover_answers_503_fast(
    group: SentinelGroup, deployment: Cluster
) -> None:
    url = await deployment.start_api(redis_switchover_wait_seconds=UNPLANNED_WAIT)
    headers = {"Authorization": f"Bearer {deployment.settings.api.api_key}"}
    bound = UNPLANNED_WAIT + CONNECT_TIMEOUT + COMMAND_TIMEOUT + 1
    answers: list[tuple[int, str | None, float]] = []
    async with aiohttp.ClientSession(headers=headers) as session:
        old = group.kill_primary()
        promoted = asyncio.ensure_future(group.wait_for_new_primary(old))
        while not promoted.done() and len(answers) < 200:
            started = time.monotonic()
            async with session.post(f"{url}/v1/runs", json={"input": "hi"}) as response:
                body = await response.json(content_type=None)
                took = time.monotonic() - started
                answers.append((response.status, response.headers.get("Retry-After"), took))
            if response.status != 202:
                assert body["error"]["code"] == "redis_unavailable", body
        await promoted
    refused = [a for a in answers if a[0] != 202]
    assert refused, "no request met the failover"
    assert all(status == 503 and retry == "1" for status, retry, _ in refused), refused
    assert max(took for *_, took in answers) < bound, answers
