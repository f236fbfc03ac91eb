"""The resend rule (redisio/replication.py): a run creation whose connection is cut after Redis
ran it (the reply lost, as Redis 7.0 cuts the clients it paused for a switchover) is sent again
and recognises its own earlier send, so the request is answered and the run exists once; a
write that cannot recognise itself is never sent again. Real Redis; the reply is lost by
``tests/support/lossy.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from hermes_queue.config import Settings
from hermes_queue.redisio import connect as connect_module
from hermes_queue.redisio.connect import close, connect
from hermes_queue.runs.model import NewRun, RunStatus
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from tests.support.inprocess import running_api
from tests.support.lossy import LosesReply, script_sha
from tests.support.redis_group import SentinelGroup


@pytest.fixture
def lossy(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[LosesReply]]:
    """Clients built from here on connect through :class:`LosesReply`."""
    monkeypatch.setattr(connect_module, "SwitchoverConnection", LosesReply)
    yield LosesReply
    LosesReply.armed = None


@pytest.fixture
async def repo(settings: Settings, lossy: type[LosesReply]) -> AsyncIterator[RunRepository]:
    client = connect(settings.redis)
    repository = RunRepository(client, settings.redis.keys, settings.runs)
    try:
        yield repository
    finally:
        await repository.aclose()
        await close(client)


async def _queued(redis: aioredis.Redis, settings: Settings, run_id: str) -> list[bytes]:
    keys = settings.redis.keys
    entries: list[bytes] = await redis.zrange(keys.queue_at(keys.shard_of(run_id)), 0, -1)
    return entries


async def test_a_run_created_whose_reply_was_lost_is_answered_and_exists_once(
    settings: Settings, redis: aioredis.Redis, lossy: type[LosesReply]
) -> None:
    async with running_api(settings) as api:
        lossy.arm(script_sha("create"))
        response = await api.post("/v1/runs", json={"input": "hi"})
        body = await response.json()
    assert response.status == 202, body
    assert lossy.lost == 1  # the first send ran; its reply never reached the API
    run_id = body["run_id"]
    assert await _queued(redis, settings, run_id) == [run_id.encode()]  # queued once
    record = await redis.hgetall(settings.redis.keys.run(run_id))
    assert record[b"status"] == b"queued"


async def test_an_idempotency_key_replays_the_run_created_on_the_resend(
    settings: Settings, redis: aioredis.Redis, lossy: type[LosesReply]
) -> None:
    headers = {"Idempotency-Key": "resend-1"}
    async with running_api(settings) as api:
        lossy.arm(script_sha("create"))
        first = await api.post("/v1/runs", json={"input": "hi"}, headers=headers)
        again = await api.post("/v1/runs", json={"input": "hi"}, headers=headers)
        one, two = await first.json(), await again.json()
    assert (first.status, lossy.lost) == (202, 1), one
    assert again.status in (200, 202) and two["run_id"] == one["run_id"], two
    assert await _queued(redis, settings, one["run_id"]) == [one["run_id"].encode()]


async def test_another_creation_of_the_same_id_is_not_taken_for_a_resend(
    repo: RunRepository,
) -> None:
    """A scheduled tick fired by two workers creates the same run id twice on purpose: the
    second must learn that the id is taken, not that it created the run."""
    run_id = new_run_id()
    assert await repo.create(NewRun(run_id, "s1", TurnRequest("hi")))
    assert not await repo.create(NewRun(run_id, "s1", TurnRequest("hi")))


async def test_a_session_run_whose_reply_was_lost_keeps_its_verdict(
    repo: RunRepository, redis: aioredis.Redis, settings: Settings, lossy: type[LosesReply]
) -> None:
    session = f"sess-{new_run_id()}"
    first, second = repo.placement.new_run_id(session), repo.placement.new_run_id(session)
    lossy.arm(script_sha("create_session_run"))
    admitted = await repo.create_session_run(
        NewRun(first, session, TurnRequest("one")), strategy="enqueue"
    )
    assert (admitted.verdict, lossy.lost) == ("created", 1)
    lossy.arm(script_sha("create_session_run"))
    parked = await repo.create_session_run(
        NewRun(second, session, TurnRequest("two")), strategy="enqueue"
    )
    assert (parked.verdict, parked.blocking_run_id, lossy.lost) == ("waiting", first, 1)
    assert await repo.session_runs(session) == (first, [second])  # parked once
    assert await _queued(redis, settings, first) == [first.encode()]


async def test_a_stop_whose_reply_was_lost_is_not_sent_again(
    repo: RunRepository, lossy: type[LosesReply]
) -> None:
    run_id = new_run_id()
    assert await repo.create(NewRun(run_id, "s1", TurnRequest("hi")))
    lossy.arm(script_sha("stop"))
    with pytest.raises(RedisConnectionError):
        await repo.request_stop(run_id)
    record = await repo.get(run_id)
    assert record is not None and record.status == RunStatus.CANCELLED  # applied, once


@pytest.fixture
def pair() -> Iterator[SentinelGroup]:
    """A primary with one replica (no Sentinels: nothing fails over here)."""
    with SentinelGroup(sentinels=0) as group:
        yield group


async def test_a_replicated_creation_sent_again_waits_for_its_replica(
    settings: Settings, pair: SentinelGroup, lossy: type[LosesReply]
) -> None:
    """With ``redis_min_replicas``: the resend finds the run and touches it, so the ``WAIT``
    after it covers the record the first send wrote; the request is answered 202, not
    ``NotReplicated``'s 503."""
    primary, replica = pair.nodes
    replicated = settings.replace(
        redis_url=f"redis://127.0.0.1:{primary.port}/0", redis_min_replicas=1
    )
    async with running_api(replicated) as api:
        lossy.arm(script_sha("create"))
        response = await api.post("/v1/runs", json={"input": "hi"})
        body: dict[str, Any] = await response.json()
    assert (response.status, lossy.lost) == (202, 1), body
    with replica.client() as follower:
        assert follower.hget(settings.redis.keys.run(body["run_id"]), "status") == b"queued"
