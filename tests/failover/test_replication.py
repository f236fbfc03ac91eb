"""``redis_min_replicas``: the writes a client is told about wait for replicas (WAIT)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from hermes_queue.config import ConfigError, Settings, load_settings
from hermes_queue.redisio import replication
from hermes_queue.redisio.replication import NotReplicated
from hermes_queue.runs.model import NewRun, RunStatus
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from tests.support.inprocess import running_api
from tests.support.redis_group import SentinelGroup


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replication, "WAIT_TIMEOUT_MS", 200)


@pytest.fixture(scope="module")
def pair() -> Iterator[SentinelGroup]:
    """A primary with one replica (no Sentinels: nothing fails over here)."""
    with SentinelGroup(sentinels=0) as group:
        yield group


def test_setting_is_read_and_checked() -> None:
    env = {"HERMES_QUEUE_REDIS_MIN_REPLICAS": "1"}
    assert load_settings(env, config_file=None).runs.min_replicas == 1
    assert Settings().runs.min_replicas == 0
    with pytest.raises(ConfigError, match="redis_min_replicas"):
        Settings.of(redis_min_replicas=-1).validate()


async def create(repo: RunRepository) -> str:
    run_id = new_run_id()
    assert await repo.create(NewRun(run_id, "s1", TurnRequest("hi")))
    return run_id


async def test_a_write_no_replica_acknowledged_raises_but_stands_on_the_primary(
    redis: Any, settings: Settings, short_wait: None
) -> None:
    # The suite's Redis has no replica: WAIT 1 can only time out.
    repo = RunRepository(redis, settings.redis.keys, settings.replace(redis_min_replicas=1).runs)
    run_id = new_run_id()
    with pytest.raises(NotReplicated) as caught:
        await repo.create(NewRun(run_id, "s1", TurnRequest("hi")))
    assert (caught.value.acknowledged, caught.value.wanted) == (0, 1)
    record = await repo.get(run_id)
    assert record is not None and record.status == RunStatus.QUEUED
    with pytest.raises(NotReplicated):
        await repo.request_stop(run_id)
    record = await repo.get(run_id)
    assert record is not None and record.status == RunStatus.CANCELLED


async def test_the_terminal_transition_only_warns(
    redis: Any, settings: Settings, short_wait: None, caplog: pytest.LogCaptureFixture
) -> None:
    plain = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = await create(plain)
    repo = RunRepository(redis, settings.redis.keys, settings.replace(redis_min_replicas=1).runs)
    attempt = await repo.claim(run_id, "w1")
    assert attempt is not None
    with caplog.at_level(logging.WARNING, logger="hermes_queue.redisio.replication"):
        assert await attempt.complete(output="x", usage={}, messages=[], runtime=None)
    assert "acknowledged by 0 of 1 replica" in caplog.text
    record = await repo.get(run_id)
    assert record is not None and record.status == RunStatus.COMPLETED
    await repo.aclose()
    await plain.aclose()


async def test_api_answers_503_when_a_run_was_not_replicated(
    settings: Settings, short_wait: None
) -> None:
    """The run stands on the primary, and its Idempotency-Key keeps it: the client's retry
    replays that run instead of starting a second one."""
    headers = {"Idempotency-Key": "retry-after-503"}
    async with running_api(settings.replace(redis_min_replicas=1)) as api:
        response = await api.post("/v1/runs", json={"input": "hello"}, headers=headers)
        body = await response.json()
        retry = await api.post("/v1/runs", json={"input": "hello"}, headers=headers)
        replay = await retry.json()
        status = await api.get(f"/v1/runs/{replay['run_id']}")
    assert response.status == 503
    assert body["error"]["code"] == "redis_unavailable"
    assert retry.status == 202 and replay["replayed"] is True
    assert status.status == 200  # the run the failed request created


async def _until_busy(node: Any) -> None:
    """Returns once the server is inside its ``DEBUG SLEEP``: a ``PING`` on a connection of its
    own goes unanswered (one answered means the sleep has not begun yet: ask again)."""
    probe = aioredis.Redis(host=node.host, port=node.port)
    try:
        for _ in range(100):
            ping = asyncio.ensure_future(probe.ping())
            done, _ = await asyncio.wait([ping], timeout=0.2)
            if not done:
                ping.cancel()
                return
            await asyncio.sleep(0.02)
        raise AssertionError("the replica never started its DEBUG SLEEP")
    finally:
        await probe.aclose()


async def test_an_acknowledged_write_is_on_the_replica_when_the_call_returns(
    pair: SentinelGroup, namespace: str
) -> None:
    primary, replica = pair.nodes
    settings = Settings.of(
        redis_url=f"redis://{primary.host}:{primary.port}/0",
        namespace=namespace,
        redis_min_replicas=1,
    )
    client = aioredis.Redis(host=primary.host, port=primary.port)
    mirror = aioredis.Redis(host=replica.host, port=replica.port)
    try:
        await client.script_flush()  # as on a freshly promoted primary: scripts load on use
        repo = RunRepository(client, settings.redis.keys, settings.runs)
        for _ in range(20):
            run_id = await create(repo)
            assert await mirror.hget(repo.keys.run(run_id), "status") == b"queued"
            await repo.request_stop(run_id)
            assert await mirror.hget(repo.keys.run(run_id), "status") == b"cancelled"
        # A replica that cannot acknowledge (busy) holds the answer back until it can: asleep
        # for less than the write's WAIT bound (2 s), longer than the 0.5 s looked at below.
        asleep = asyncio.create_task(mirror.execute_command("DEBUG", "SLEEP", "1.5"))
        await _until_busy(replica)
        creating = asyncio.create_task(create(repo))
        done, _ = await asyncio.wait([creating], timeout=0.5)
        assert not done, "the create answered before its replica acknowledged it"
        await asleep
        run_id = await creating
        assert await mirror.hget(repo.keys.run(run_id), "status") == b"queued"
    finally:
        await client.aclose()
        await mirror.aclose()
